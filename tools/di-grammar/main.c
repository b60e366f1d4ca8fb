/* di-grammar: the structured-output stage. Request frames with a constraint (a JSON schema,
 * json_object, or a regex) are compiled against the vocabulary; a valid one goes on in
 * canonical form with its hash (constraint.hash, see docs/PROTOCOL.md), so the stage that
 * samples compiles each distinct constraint once and knows it is valid; an invalid or
 * unsupported one becomes that request's error frame (code bad_constraint). Everything
 * else passes through with this stage's trace hop. Compiles are cached by hash. */
#include "cli.h"
#include "grammar.h"
#include "io.h"
#include "log.h"
#include "stage_loop.h"
#include "stats.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *STAGE = "di-grammar";

typedef struct {
    grammar_cache_t *cache;
    frame_out_t *out;
    stage_stats_t *st;
    uint64_t compiles, hits, refused, compile_ns;
} engine_t;

static void refuse(engine_t *e, frame_t *req, uint64_t in_us, const char *why)
{
    char message[1200];
    snprintf(message, sizeof message, "%s constraint: %s", constraint_kind_name(req->constraint.kind), why);
    log_info("request '%s': %s", req->id, message);
    frame_t err;
    frame_make_error(&err, req->id, req->seq, STAGE, "bad_constraint", message);
    err.has_meta = true;
    frame_meta_copy(&err.meta, &req->meta);
    for (uint32_t i = 0; i < req->n_hops; i++) frame_add_hop(&err, req->hops[i].stage, req->hops[i].in_us, req->hops[i].out_us);
    frame_add_hop(&err, STAGE, in_us, wall_us());
    frame_out_send(e->out, &err);
    frame_free(&err);
    e->st->errors++;
    e->refused++;
}

static void submit(void *engine, frame_t *req, uint64_t in_us)
{
    engine_t *e = engine;
    e->st->requests++;
    frame_constraint_t *c = &req->constraint;
    if (c->kind != CONSTRAINT_NONE) {
        char err[1024];
        bool hit;
        uint64_t t0 = now_ns();
        grammar_t *g = grammar_cache_get(e->cache, c->kind, c->text, &hit, err, sizeof err);
        if (hit) e->hits++;
        else e->compiles++, e->compile_ns += now_ns() - t0;
        if (!g) {
            refuse(e, req, in_us, err);
            return;
        }
        free(c->text);
        c->text = grammar_canonical(g) ? xstrdup(grammar_canonical(g)) : NULL;
        c->has_hash = true;
        c->hash = grammar_hash(g);
        grammar_unref(g);
    }
    frame_add_hop(req, STAGE, in_us, wall_us());
    frame_out_send(e->out, req);
}

static bool always(void *engine) { return (void)engine, true; }
static void no_step(void *engine) { (void)engine; }

int main(int argc, char **argv)
{
    const char *tokenizer_path = NULL;
    int64_t cache_entries = 256;
    cli_opt_t opts[] = {
        {"tokenizer", CLI_STRING, &tokenizer_path, "PATH", "tokenizer.json (default: data/tokenizer/ next to bin/)", 0, 0},
        {"cache", CLI_INT, &cache_entries, "N", "distinct constraints kept compiled (default 256)", 1, 1 << 20},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-grammar",
        .usage = "[options] < requests.frames > requests.frames",
        .summary = "Validates the constraint of each request (response_format json_schema, json_object, or regex)\n"
                   "by compiling it against the vocabulary, and forwards the request with the constraint in canonical\n"
                   "form and its hash; an invalid or unsupported constraint fails that request (bad_constraint).\n"
                   "Requests without a constraint and all other frames pass through.",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);

    char err[512];
    if (!tokenizer_path) tokenizer_path = tokenizer_default_path();
    tokenizer_t *tok = tokenizer_load(tokenizer_path, err, sizeof err);
    if (!tok) die("cannot load the tokenizer %s: %s", tokenizer_path, err);
    grammar_vocab_t *vocab = grammar_vocab_from_tokenizer(tok);

    stage_stats_t st;
    stats_start(&st, STAGE);
    frame_in_t *in = frame_in_open(common.in, &common);
    frame_out_t *out = frame_out_open(common.out, &common, STAGE);
    /* validation needs the automaton only; token masks are built where tokens are sampled */
    engine_t e = {grammar_cache_new(vocab, (uint32_t)cache_entries, false), out, &st, 0, 0, 0, 0};
    stage_engine_t se = {STAGE, FRAME_REQUEST, 0, NULL, &e, always, always, submit, no_step};
    bool ok = stage_loop(&se, in, out, &st);
    frame_in_close(in);
    const io_counters_t out_counters = *frame_out_counters(out);
    frame_out_finish(out, frame_in_ledger(in));
    io_shutdown();
    if (common.stats) {
        stats_print(&st, frame_in_counters(in), &out_counters);
        fprintf(stderr, "%s: stats: compiles %llu\n", STAGE, (unsigned long long)e.compiles);
        fprintf(stderr, "%s: stats: cache_hits %llu\n", STAGE, (unsigned long long)e.hits);
        fprintf(stderr, "%s: stats: refused %llu\n", STAGE, (unsigned long long)e.refused);
        fprintf(stderr, "%s: stats: compile_s %.6f\n", STAGE, (double)e.compile_ns / 1e9);
    }
    grammar_cache_free(e.cache);
    frame_in_free(in);
    grammar_vocab_free(vocab);
    tokenizer_free(tok);
    return ok ? 0 : 1;
}
