#include "kmp.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>

void kmp_init(kmp_t *k, const void *pat, size_t len)
{
    k->len = len;
    k->pat = xmalloc(len ? len : 1);
    memcpy(k->pat, pat, len);
    k->fail = xcalloc(len ? len : 1, sizeof *k->fail);
    for (size_t i = 1, m = 0; i < len;) {
        if (k->pat[i] == k->pat[m])
            k->fail[i++] = ++m;
        else if (m)
            m = k->fail[m - 1];
        else
            k->fail[i++] = 0;
    }
}

void kmp_free(kmp_t *k)
{
    free(k->pat);
    free(k->fail);
    memset(k, 0, sizeof *k);
}

size_t kmp_step(const kmp_t *k, size_t matched, uint8_t byte)
{
    while (matched && (matched == k->len || k->pat[matched] != byte))
        matched = k->fail[matched - 1];
    if (matched < k->len && k->pat[matched] == byte) matched++;
    return matched;
}
