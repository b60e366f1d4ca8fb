#include "constraints.h"
#include "textstream.h"
#include "threadpool.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct constraints {
    constraints_opts_t o;
    bool tried;                /* the vocabulary was loaded, or failed to */
    char why[512];             /* why there is none */
    grammar_vocab_t *own;      /* built here (else o.vocab) */
    const grammar_vocab_t *vocab;
    threadpool_t *pool;
    grammar_cache_t *cache;
    constraints_stats_t stats;
};

constraints_t *constraints_new(const constraints_opts_t *o) {
    constraints_t *c = xcalloc(1, sizeof *c);
    c->o = *o;
    if (!c->o.cache_entries) c->o.cache_entries = 64;
    return c;
}

void constraints_free(constraints_t *c) {
    if (!c) return;
    grammar_cache_free(c->cache);
    grammar_vocab_free(c->own);
    if (c->pool) tp_free(c->pool);
    free(c);
}

/* The grammar's vocabulary from the tokenizer: it must be the model's (same size, same EOS). */
static grammar_vocab_t *from_tokenizer(constraints_t *c, const tokenizer_t *tok) {
    textstream_t ts; /* its end-of-sentence id is the one the sink drops */
    textstream_init(&ts, tok);
    if ((int64_t)tokenizer_vocab_size(tok) != c->o.vocab_size)
        snprintf(c->why, sizeof c->why, "the tokenizer has %u tokens, the model %lld", tokenizer_vocab_size(tok),
                 (long long)c->o.vocab_size);
    else if (ts.eos != c->o.eos)
        snprintf(c->why, sizeof c->why, "the tokenizer's end-of-sentence id is %lld, the model's %lld", (long long)ts.eos,
                 (long long)c->o.eos);
    return c->why[0] ? NULL : grammar_vocab_from_tokenizer(tok);
}

static void load(constraints_t *c) {
    c->tried = true;
    uint64_t t0 = now_ns();
    if (c->o.vocab) {
        if ((int64_t)grammar_vocab_size(c->o.vocab) == c->o.vocab_size) c->vocab = c->o.vocab;
        else
            snprintf(c->why, sizeof c->why, "the grammar vocabulary has %u tokens, the model %lld",
                     grammar_vocab_size(c->o.vocab), (long long)c->o.vocab_size);
    } else if (c->o.tok) {
        c->vocab = c->own = from_tokenizer(c, c->o.tok);
    } else {
        const char *path = c->o.tokenizer_path ? c->o.tokenizer_path : tokenizer_default_path();
        char err[400];
        tokenizer_t *tok = tokenizer_load(path, err, sizeof err);
        if (!tok) snprintf(c->why, sizeof c->why, "cannot load the tokenizer %s: %s", path, err);
        else c->vocab = c->own = from_tokenizer(c, tok); /* the vocabulary keeps its own copy of the bytes */
        tokenizer_free(tok);
    }
    if (!c->vocab) return;
    if (c->own && c->o.threads > 1) {
        c->pool = tp_create(c->o.threads);
        grammar_vocab_use_threads(c->own, c->pool);
    }
    c->cache = grammar_cache_new(c->vocab, c->o.cache_entries, true);
    c->stats.load_ns = now_ns() - t0;
}

int constraints_matcher(constraints_t *c, const frame_t *f, grammar_matcher_t **m, const char **code, char *err,
                        size_t errlen) {
    const frame_constraint_t *k = &f->constraint;
    *m = NULL;
    if (k->kind == CONSTRAINT_NONE) return 0;
    if (!c) {
        *code = "unsupported";
        snprintf(err, errlen, "this stage applies no constraints");
        return -1;
    }
    c->stats.requests++;
    if (!c->tried) load(c);
    if (!c->vocab) {
        *code = "unsupported";
        snprintf(err, errlen, "constrained decoding needs the model's vocabulary, which this stage has not: %s", c->why);
        c->stats.refused++;
        return -1;
    }
    *code = "bad_constraint";
    uint64_t key = grammar_key(c->vocab, k->kind, k->text);
    if (k->has_hash && k->hash != key) {
        snprintf(err, errlen,
                 "%s constraint: hash %016llx is not this stage's grammar key %016llx: di-grammar ran with another tokenizer or "
                 "build",
                 constraint_kind_name(k->kind), (unsigned long long)k->hash, (unsigned long long)key);
        c->stats.refused++;
        return -1;
    }
    bool hit;
    char why[1024];
    uint64_t t0 = now_ns();
    grammar_t *g = grammar_cache_get(c->cache, k->kind, k->text, &hit, why, sizeof why);
    if (hit) c->stats.hits++;
    else c->stats.compiles++, c->stats.compile_ns += now_ns() - t0;
    if (!g) {
        snprintf(err, errlen, "%s constraint: %s", constraint_kind_name(k->kind), why);
        c->stats.refused++;
        return -1;
    }
    *m = grammar_matcher_new(g, f->meta.thinking);
    grammar_unref(g); /* the matcher holds it */
    return 0;
}

size_t constraints_mask_words(const constraints_t *c) { return (size_t)(c->o.vocab_size + 31) / 32; }

const constraints_stats_t *constraints_stats(const constraints_t *c) { return &c->stats; }

void constraints_print_stats(FILE *f, const char *stage, const constraints_stats_t *s) {
    if (!s->requests) return;
    fprintf(f, "%s: stats: grammar_requests %llu\n", stage, (unsigned long long)s->requests);
    fprintf(f, "%s: stats: grammar_refused %llu\n", stage, (unsigned long long)s->refused);
    fprintf(f, "%s: stats: grammar_compiles %llu\n", stage, (unsigned long long)s->compiles);
    fprintf(f, "%s: stats: grammar_cache_hits %llu\n", stage, (unsigned long long)s->hits);
    fprintf(f, "%s: stats: grammar_compile_s %.6f\n", stage, (double)s->compile_ns / 1e9);
    fprintf(f, "%s: stats: grammar_load_s %.6f\n", stage, (double)s->load_ns / 1e9);
}
