/* Grammar benchmark on the real vocabulary: for every constraint of the acceptance set
 * (tests/data/grammar_schemas.jsonl, tests/data/grammar_regexes.jsonl), the compile time
 * (automaton, then token masks; best of --repeat) and the time of every
 * grammar_matcher_fill_mask call while generating --seeds outputs through the masks
 * (grammar_walk: the model loop with random choices). Prints one line per constraint and
 * the distribution over all of them.
 *
 *   build/bench/grammar_bench [--repeat N] [--seeds N] [--threads N] [--tokenizer PATH] [--data DIR]
 *
 * --threads: threads computing token masks (default 1). */
#include "grammar.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t *v;
    size_t n, cap;
} samples_t;

static void add(samples_t *s, uint64_t x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(samples_t *s, double p)
{
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_u64);
    size_t i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
    return (double)s->v[i];
}

static double mean(const samples_t *s)
{
    double t = 0;
    for (size_t i = 0; i < s->n; i++) t += (double)s->v[i];
    return s->n ? t / (double)s->n : 0;
}

typedef struct {
    grammar_vocab_t *vocab;
    int repeat, seeds;
    samples_t compile_ns, mask_ns;
} bench_t;

static void run_one(bench_t *b, const char *name, constraint_kind_t kind, const char *text)
{
    char err[512];
    grammar_t *g = NULL;
    uint64_t best_auto = UINT64_MAX, best_masks = UINT64_MAX;
    for (int r = 0; r < b->repeat; r++) {
        grammar_unref(g);
        g = grammar_compile(b->vocab, kind, text, true, err, sizeof err);
        if (!g) {
            printf("%-22s compile error: %s\n", name, err);
            return;
        }
        grammar_stats_t st = grammar_stats(g);
        if (st.compile_ns + st.masks_ns < best_auto + best_masks) best_auto = st.compile_ns, best_masks = st.masks_ns;
    }
    add(&b->compile_ns, best_auto + best_masks);
    samples_t local = {0};
    int finished = 0;
    for (int seed = 1; seed <= b->seeds; seed++) {
        grammar_walk_opts_t o = {.seed = (uint64_t)seed};
        grammar_walk_t w;
        grammar_walk(g, &o, &w);
        finished += w.finished;
        for (uint32_t i = 0; i < w.n_mask_ns; i++) add(&local, w.mask_ns[i]), add(&b->mask_ns, w.mask_ns[i]);
        grammar_walk_free(&w);
    }
    grammar_stats_t st = grammar_stats(g);
    size_t steps = local.n;
    printf("%-22s %6u %3u %8.2f %8.2f %6zu %7.2f %7.2f %8.2f %3d/%d\n", name, st.states, st.rules, best_auto / 1e6,
           best_masks / 1e6, steps, pct(&local, 50) / 1e3, pct(&local, 99) / 1e3, pct(&local, 100) / 1e3, finished, b->seeds);
    free(local.v);
    grammar_unref(g);
}

static void run_file(bench_t *b, const char *path, bool schemas)
{
    json_error_t jerr;
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        /* instance lists may hold integers beyond 64 bits: read numbers as reals */
        json_t *c = json_loads(line, JSON_DECODE_INT_AS_REAL, &jerr);
        if (!c) die("%s: %s", path, jerr.text);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *text = json_string_value(json_object_get(c, schemas ? "schema" : "regex"));
        run_one(b, name, schemas ? CONSTRAINT_JSON_SCHEMA : CONSTRAINT_REGEX, text);
        json_decref(c);
    }
    free(line);
    fclose(f);
}

int main(int argc, char **argv)
{
    bench_t b = {.repeat = 3, .seeds = 8};
    int threads = 1;
    const char *tok_path = NULL, *data = "tests/data";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) b.repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) b.seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else die("usage: grammar_bench [--repeat N] [--seeds N] [--threads N] [--tokenizer PATH] [--data DIR]");
    }
    if (b.repeat < 1) b.repeat = 1;
    char err[512];
    if (!tok_path) tok_path = tokenizer_default_path();
    tokenizer_t *tok = tokenizer_load(tok_path, err, sizeof err);
    if (!tok) die("cannot load %s: %s", tok_path, err);
    uint64_t t0 = now_ns();
    b.vocab = grammar_vocab_from_tokenizer(tok);
    threadpool_t *tp = threads > 1 ? tp_create(threads) : NULL;
    grammar_vocab_use_threads(b.vocab, tp);
    printf("vocabulary: %u tokens, prepared in %.1f ms (once per process); masks on %d thread(s)\n\n",
           grammar_vocab_size(b.vocab), (now_ns() - t0) / 1e6, threads > 1 ? threads : 1);
    printf("%-22s %6s %3s %8s %8s %6s %7s %7s %8s %s\n", "constraint", "states", "rul", "auto ms", "masks ms", "steps",
           "med us", "p99 us", "max us", "done");
    char path[1024];
    snprintf(path, sizeof path, "%s/grammar_schemas.jsonl", data);
    run_file(&b, path, true);
    snprintf(path, sizeof path, "%s/grammar_regexes.jsonl", data);
    run_file(&b, path, false);
    printf("\ncompile (automaton + masks), %zu constraints: median %.2f ms, p90 %.2f ms, max %.2f ms\n", b.compile_ns.n,
           pct(&b.compile_ns, 50) / 1e6, pct(&b.compile_ns, 90) / 1e6, pct(&b.compile_ns, 100) / 1e6);
    printf("mask per token, %zu tokens: mean %.2f us, median %.2f us, p99 %.2f us, p99.9 %.2f us, max %.2f us\n",
           b.mask_ns.n, mean(&b.mask_ns) / 1e3, pct(&b.mask_ns, 50) / 1e3, pct(&b.mask_ns, 99) / 1e3,
           pct(&b.mask_ns, 99.9) / 1e3, pct(&b.mask_ns, 100) / 1e3);
    free(b.compile_ns.v);
    free(b.mask_ns.v);
    grammar_vocab_free(b.vocab);
    if (tp) tp_free(tp);
    tokenizer_free(tok);
    return 0;
}
