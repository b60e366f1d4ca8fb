/* Parser of the model's output text: splits reasoning from the answer, turns V4 DSML tool-call
 * markup into OpenAI tool calls and ends the answer at stop strings. It reproduces, byte for
 * byte, how deepseek-recipe 0.2.0 (the reference serving code) parses DeepSeek V4 output:
 *
 *   - thinking mode: text up to "</think>" is reasoning (leading newlines dropped unless the
 *     prompt continues an assistant prefix, newlines right before "</think>" dropped); the
 *     answer then starts, leading newlines dropped.
 *     A "</think>" met in the answer is dropped. "<｜DSML｜" (with any newlines before it)
 *     starts tool calls, even inside the reasoning.
 *   - tool calls: each `invoke name="N">` opens a call named N; its arguments are built as
 *     JSON text: `parameter name=` up to the next space gives the key, copied as written
 *     (quotes included); `string="true">` values are JSON-escaped inside quotes, `string="false">`
 *     values are copied verbatim; "</｜DSML｜" ends a value or a call. The block's end
 *     (`</｜DSML｜ calls>` or V4's `</｜DSML｜tool_calls>`) finishes the output: later text is
 *     dropped. Markup cut short (max_tokens) leaves the call as far as it got; a call whose
 *     name never closed is not reported. Nothing is validated, as in recipe.
 *   - stop strings apply to the answer only (not reasoning, not markup); the first one whose
 *     last byte arrives wins (ties: the earlier in the list), the answer ends before it.
 *   - JSON mode (response_format json_object): the first "```json\n", "```\n", "{" or "[" starts
 *     the JSON, "\n```" ends it; each run of text around it becomes one space.
 *
 * Text is fed in pieces of any size; markers split across pieces are recognised, and text
 * that could still be the start of a marker or stop string is held back until it cannot. */
#ifndef DI_OUTPARSE_H
#define DI_OUTPARSE_H

#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    bool plain;         /* raw completion: text is the answer, only stop strings act on it */
    bool thinking;      /* the prompt ended with <think>: output starts in the reasoning */
    bool continuation;  /* the prompt continues an assistant prefix: leading newlines are kept */
    bool tools;         /* the request declared tools: parse DSML tool calls */
    bool in_tool_calls; /* the prompt opened the tool-call block: output starts inside it */
    bool json;          /* JSON output mode */
    char *const *stop;  /* stop strings, valid UTF-8 (empty ones are ignored) */
    uint32_t n_stop;
} outparse_opts_t;

typedef struct {
    char *name;
    buf_t args;         /* the arguments as JSON text, as far as the markup went */
} outparse_call_t;

typedef struct {
    /* Results, growing as text is fed. */
    buf_t content;
    buf_t reasoning;
    outparse_call_t *calls;
    size_t n_calls;
    bool stopped;       /* a stop string ended the answer */

    struct outparse_state *st; /* private */
} outparse_t;

void outparse_init(outparse_t *p, const outparse_opts_t *opts);
void outparse_free(outparse_t *p);
/* Feeds text (whole UTF-8 characters). Returns true once a stop string has ended the answer. */
bool outparse_push(outparse_t *p, const char *text, size_t len);
/* End of output: held-back text gets the action of the stage it is in. */
void outparse_finish(outparse_t *p);

#endif
