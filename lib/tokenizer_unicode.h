/* Unicode data for translating HF's regexes to PCRE2 (generated: tokenizer_unicode.c).
 * HF's regex engine (Oniguruma) has newer Unicode tables than our PCRE2, so each \p{X} is
 * widened by the code points that were assigned to X since PCRE2's Unicode version. */
#ifndef DI_TOKENIZER_UNICODE_H
#define DI_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t lo, hi; /* inclusive */
} tok_range_t;

typedef struct {
    const char *name; /* general category, "L" or "Lu" */
    const tok_range_t *extra;
    size_t count;
} tok_category_t;

/* The categories that can be translated; a category missing here is refused. */
extern const tok_category_t tok_categories[];
extern const size_t tok_category_count;
/* Every code point Oniguruma's \s matches. */
extern const tok_range_t *const tok_space;
extern const size_t tok_space_count;

#endif
