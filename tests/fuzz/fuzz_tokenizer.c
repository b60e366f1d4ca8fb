/* libFuzzer target: the V4 tokenizer on arbitrary bytes. Valid UTF-8 must encode in both
 * modes and decode back to the same bytes; anything else must be refused, never crash.
 * The tokenizer is the default one (tokenizer.h: $DI_TOKENIZER or data/tokenizer/). */
#include "tokenizer.h"
#include "tokenizer_once.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const tokenizer_t *t = tokenizer_once();
    const char *text = (const char *)data;
    bool valid = utf8_valid(text, size);
    for (int added = 0; added < 2; added++) {
        ids_t ids = {0};
        int rc = added ? tokenizer_encode_with_added(t, text, size, &ids) : tokenizer_encode(t, text, size, &ids);
        if (rc != (valid ? 0 : -1)) abort();
        buf_t back = {0};
        if (tokenizer_decode(t, ids.v, ids.n, &back) != 0) abort();
        if (valid && (back.len != size || (size && memcmp(back.data, data, size)))) abort();
        ids_free(&ids);
        buf_free(&back);
    }
    return 0;
}
