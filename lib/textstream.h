/* Token ids to UTF-8 text, incrementally (utf8stream does the UTF-8 part: no character is
 * ever split, ill-formed bytes become U+FFFD as in HF tokenizers' decode).
 *
 * Special tokens: the end-of-sentence token never appears in the text (it ends generation;
 * it is not part of the answer). Every other token, special or not, contributes its spelling,
 * as HF decode with skip_special_tokens=False and deepseek-recipe's decoder do: <think>,
 * </think> and the DSML markup must reach the output parser, which turns them into structure. */
#ifndef DI_TEXTSTREAM_H
#define DI_TEXTSTREAM_H

#include "tokenizer.h"
#include "utf8stream.h"
#include "util.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const tokenizer_t *tok;
    int64_t eos;      /* id of the end-of-sentence token, -1 if the vocabulary has none */
    utf8stream_t utf8;
} textstream_t;

void textstream_init(textstream_t *ts, const tokenizer_t *tok);
/* Appends the complete text of ids to out. Returns -1, naming the id in err, when an id
 * is outside the vocabulary (nothing of that call is appended then). */
int textstream_push(textstream_t *ts, const uint32_t *ids, size_t n, buf_t *out, char *err, size_t errlen);
/* End of output: an incomplete character becomes U+FFFD. */
void textstream_finish(textstream_t *ts, buf_t *out);

#endif
