/* Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (the DeepSeek V4 one:
 * normalizer, pre-tokenizer split regexes, byte-level mapping, merges by rank, added tokens).
 * Encoding gives the same ids as HF tokenizers on the same file. */
#ifndef DI_TOKENIZER_H
#define DI_TOKENIZER_H

#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer_t;

/* Loads tokenizer.json. NULL on failure, with the reason in err: unreadable or invalid JSON,
 * or a feature this tokenizer does not implement exactly (it is refused, by name, rather
 * than tokenized differently from HF). */
tokenizer_t *tokenizer_load(const char *path, char *err, size_t errlen);
/* Also frees every thread's scratch space: no thread may be encoding with t meanwhile. */
void tokenizer_free(tokenizer_t *t);

/* The default tokenizer.json: $DI_TOKENIZER, else <dir of the executable>/../data/tokenizer/,
 * else data/tokenizer/ under the current directory. Returns a static buffer. */
const char *tokenizer_default_path(void);

/* For tools: loads path (NULL: the default) or exits with a one-line reason. */
tokenizer_t *tokenizer_load_or_die(const char *path);

/* Plain-text encoding: the text is ordinary text, so the spelling of a special or added
 * token inside it is tokenized as text, never turned into a control token (deepseek-recipe's
 * "prompt encoding" of the text between special ranges). Appends to out and returns 0.
 * Invalid UTF-8 is the caller's to reject: returns -1, out unchanged (also for a text of
 * 4 GiB or more, or if the regex engine hits a resource limit). Thread-safe: each thread
 * gets its own scratch space and word cache. */
int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, ids_t *out);

/* HF `Tokenizer.encode(text, add_special_tokens=False)`: added tokens (special or not) that
 * appear in the text become their ids, the text between them is encoded as above.
 * Returns 0, or -1 as tokenizer_encode. */
int tokenizer_encode_with_added(const tokenizer_t *t, const char *text, size_t len, ids_t *out);

/* The id of an added/special token spelled exactly `text`, or -1. */
int64_t tokenizer_added_id(const tokenizer_t *t, const char *text, size_t len);

/* The bytes a token stands for in decoded text (byte-level mapping undone; an added token
 * gives its spelling). NULL for an id outside the vocabulary. */
const uint8_t *tokenizer_token_bytes(const tokenizer_t *t, uint32_t id, size_t *len);
bool tokenizer_is_special(const tokenizer_t *t, uint32_t id);
uint32_t tokenizer_vocab_size(const tokenizer_t *t);

/* Appends the bytes of ids to out (special tokens included, as HF decode with
 * skip_special_tokens=False). The bytes are raw: a token may end inside a UTF-8 sequence,
 * where HF's decode would put U+FFFD. Returns -1 (out unchanged) if an id is outside the
 * vocabulary. */
int tokenizer_decode(const tokenizer_t *t, const uint32_t *ids, size_t n, buf_t *out);

#endif
