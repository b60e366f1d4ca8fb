/* The default tokenizer (tokenizer.h: $DI_TOKENIZER or data/tokenizer/) for the fuzz targets
 * that need one: loaded at the first input and kept for the whole run. */
#ifndef DI_FUZZ_TOKENIZER_ONCE_H
#define DI_FUZZ_TOKENIZER_ONCE_H

#include "tokenizer.h"

static tokenizer_t *tokenizer_once(void)
{
    static tokenizer_t *t;
    if (!t) t = tokenizer_load_or_die(NULL);
    return t;
}

#endif
