/* libFuzzer target: the JSONL request parser (one line -> a request frame or an error).
 * Whatever the bytes, the result is either a request with a prompt, which must survive the
 * frame encoding, or an error with a message. Tokenizer: the default (tokenizer.h). */
#include "request.h"
#include "tokenizer_once.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    request_limits_t limits = {4096, 1 << 20, "DeepSeek-V4.1-Flash"};
    frame_t f;
    char err[512] = "";
    const char *code = NULL;
    int rc = request_from_line(tokenizer_once(), &limits, (const char *)data, size, 3, &f, err, sizeof err, &code);
    if (rc == 0) {
        if (f.type != FRAME_REQUEST || !f.n_tokens || !f.id) abort();
        buf_t b = {0};
        frame_encode(&f, &b);
        frame_t g;
        if (frame_decode(b.data, b.len, &g, NULL, NULL, err, sizeof err) != 0) abort();
        frame_free(&g);
        buf_free(&b);
    } else if (!err[0] || !code) {
        abort();
    }
    frame_free(&f);
    return 0;
}
