#include "textstream.h"

#include <stdio.h>
#include <string.h>

void textstream_init(textstream_t *ts, const tokenizer_t *tok)
{
    static const char eos[] = "<｜end▁of▁sentence｜>";
    memset(ts, 0, sizeof *ts);
    ts->tok = tok;
    ts->eos = tokenizer_added_id(tok, eos, sizeof eos - 1);
}

int textstream_push(textstream_t *ts, const uint32_t *ids, size_t n, buf_t *out, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (!tokenizer_token_bytes(ts->tok, ids[i], &(size_t){0})) {
            snprintf(err, errlen, "token id %u is outside the vocabulary (%u ids)", ids[i],
                     tokenizer_vocab_size(ts->tok));
            return -1;
        }
    for (size_t i = 0; i < n; i++) {
        if ((int64_t)ids[i] == ts->eos) continue;
        size_t len;
        const uint8_t *bytes = tokenizer_token_bytes(ts->tok, ids[i], &len);
        utf8stream_push(&ts->utf8, bytes, len, out);
    }
    return 0;
}

void textstream_finish(textstream_t *ts, buf_t *out)
{
    utf8stream_finish(&ts->utf8, out);
}
