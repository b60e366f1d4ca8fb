/* The grammar side of a stage that samples (di-prefill draws a request's first token,
 * di-decode the rest): the vocabulary as the grammar sees it and the compiled grammars, each
 * distinct constraint compiled once with its token masks (grammar.h, docs/GRAMMAR.md).
 *
 * Nothing is loaded until the first constrained request: a stage that never sees one never
 * pays for the vocabulary (the tokenizer unless the stage has it already: about 0.35 s and
 * 26 MB; then the grammar's tries: 35-60 ms and 4 MB, once).
 *
 * For a request, constraints_matcher checks the constraint against the hash di-grammar gave
 * it (a mismatch means another tokenizer or build compiled it: the request fails rather than
 * running under a grammar nobody validated) and returns a matcher at the start of the output,
 * inside the reasoning when meta.thinking. A sampler then draws each token within the
 * matcher's mask (grammar_matcher_fill_mask: EOS exactly where the output so far is complete,
 * in thinking mode every token but EOS until </think>) and accepts it. */
#ifndef DI_CONSTRAINTS_H
#define DI_CONSTRAINTS_H

#include "frame.h"
#include "grammar.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef struct {
    const grammar_vocab_t *vocab; /* a ready vocabulary (tests), borrowed; else built from: */
    const tokenizer_t *tok;       /* a loaded tokenizer, borrowed; else loaded from: */
    const char *tokenizer_path;   /* this tokenizer.json (NULL: the default one) */
    int64_t vocab_size;           /* the model's: a vocabulary of another size is refused */
    int64_t eos;                  /* the model's end-of-sentence id: the tokenizer's must agree */
    uint32_t cache_entries;       /* distinct constraints kept compiled (0: 64) */
    int threads;                  /* threads computing token masks at compile time (0: one) */
} constraints_opts_t;

typedef struct {
    uint64_t requests, compiles, hits, refused;
    uint64_t load_ns, compile_ns; /* vocabulary, compiles with masks */
} constraints_stats_t;

typedef struct constraints constraints_t;

constraints_t *constraints_new(const constraints_opts_t *o);
void constraints_free(constraints_t *c);

/* For the request in f: *m = NULL when it has no constraint; else a new matcher at the start
 * of its output. Returns 0, or -1 with *code ("bad_constraint": it does not compile, or its
 * hash is not this stage's; "unsupported": this stage has no vocabulary matching the model, or
 * c is NULL: a stage that applies no constraints) and the reason in err. The first
 * constrained request loads the vocabulary. */
int constraints_matcher(constraints_t *c, const frame_t *f, grammar_matcher_t **m, const char **code, char *err,
                        size_t errlen);

/* uint32 words of a mask: ceil(vocab_size / 32). */
size_t constraints_mask_words(const constraints_t *c);

const constraints_stats_t *constraints_stats(const constraints_t *c);
/* The --stats lines "<stage>: stats: grammar_..." when constrained requests came; else none. */
void constraints_print_stats(FILE *f, const char *stage, const constraints_stats_t *s);

#endif
