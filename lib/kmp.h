/* Incremental matching of one literal byte string (Knuth-Morris-Pratt): feed the text a byte
 * at a time and learn how much of the pattern the text currently ends with. The parser of
 * model output uses it for its markers and the caller's stop strings. */
#ifndef DI_KMP_H
#define DI_KMP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *pat;
    size_t len;
    size_t *fail; /* fail[i]: longest proper prefix of pat[0..i] that is also its suffix */
} kmp_t;

void kmp_init(kmp_t *k, const void *pat, size_t len);
void kmp_free(kmp_t *k);

/* The text so far ended with the first `matched` bytes of the pattern (matched < len);
 * returns how many it ends with after `byte`. A result of k->len is a complete match. */
size_t kmp_step(const kmp_t *k, size_t matched, uint8_t byte);

#endif
