/* JSON text in the spellings the DeepSeek prompts use. All keep the key order of the value
 * and write non-ASCII characters as they are.
 *   PYTHON  what Python's json.dumps(ensure_ascii=False) writes: ", " and ": " separators,
 *           floats as repr() (1e-05, 1e+16). The V4.1 prompt (tool schemas and arguments,
 *           response schemas).
 *   SPACED  the same separators, floats as COMPACT writes them. The V4 prompt.
 *   COMPACT no spaces, floats in fixed notation for exponents -5..15, else 1e-06 / 1e+16
 *           style without padding (1e-6). Output constraints. */
#ifndef DI_CHAT_JSON_H
#define DI_CHAT_JSON_H

#include "util.h"

#include <jansson.h>

typedef enum { CHAT_JSON_PYTHON, CHAT_JSON_SPACED, CHAT_JSON_COMPACT } chat_json_style_t;

void chat_json_write(buf_t *out, const json_t *v, chat_json_style_t style);

#endif
