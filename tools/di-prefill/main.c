/* di-prefill: the pipeline's prefill stage. Request frames in, one state frame per request out
 * (lib/prefill_engine.h): prompts packed into batched forwards under a token budget, the first
 * output token sampled, the sequence state serialized for di-decode. With --logits it instead
 * prints the logits of one prompt (top-k with probabilities, or all; last or every position),
 * which is how to check a checkpoint. */
#include "cli.h"
#include "constraints.h"
#include "device.h"
#include "forward.h"
#include "io.h"
#include "log.h"
#include "logits_report.h"
#include "prefill_engine.h"
#include "seqstate_io.h"
#include "stage_loop.h"
#include "stats.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *STAGE = "di-prefill";

typedef struct {
    const char *model_dir, *token_map, *device, *tokenizer;
    bool qat;
    int64_t replay, threads, context, grammar_cache;
} model_args_t;

/* "1,2,3" -> ids; dies naming the bad element. */
static void parse_ids(const char *s, ids_t *out) {
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t v;
        while (*tok == ' ') tok++;
        if (!parse_i64(tok, 0, UINT32_MAX, &v)) die("--ids: '%s' is not a token id", tok);
        ids_push(out, (uint32_t)v);
    }
    free(copy);
    if (!out->n) die("--ids: no token ids in '%s'", s);
}

typedef struct {
    const char *ids, *text, *position, *tokenizer;
    bool json, stats;
    int64_t top_k, chunk;
} logits_args_t;

static int logits_main(const model_args_t *a, const logits_args_t *l, model_t *m) {
    if (!l->ids == !l->text) die("give the prompt with exactly one of --ids or --text");
    if (strcmp(l->position, "all") && strcmp(l->position, "last")) die("--position must be all or last");
    char err[1024];
    tokenizer_t *tok = NULL;
    const char *tpath = l->tokenizer ? l->tokenizer : tokenizer_default_path();
    if (l->text || l->tokenizer) {
        tok = tokenizer_load(tpath, err, sizeof err);
        if (!tok) die("tokenizer %s: %s", tpath, err);
    }
    ids_t ids = {0};
    if (l->ids) parse_ids(l->ids, &ids);
    else if (tokenizer_encode_with_added(tok, l->text, strlen(l->text), &ids) || !ids.n)
        die("--text: cannot tokenize it (invalid UTF-8, or empty)");
    int64_t V = m->cfg.vocab_size, replay = a->replay > (int64_t)ids.n ? (int64_t)ids.n : a->replay;
    if (!tok && V == 129280) tok = tokenizer_load(tpath, err, sizeof err); /* token text when the vocabularies match */
    if (tok && tokenizer_vocab_size(tok) != V) {
        tokenizer_free(tok);
        tok = NULL;
    }
    bool all = !strcmp(l->position, "all");
    seqstate_t *st = seqstate_new(m, a->qat);
    float *logits = xmalloc((size_t)(all ? ids.n : 1) * (size_t)V * sizeof(float));
    int64_t rows = 0;
    uint64_t t0 = now_ns();
    if (forward_prompt(st, ids.v, (int64_t)ids.n, replay, l->chunk, all ? FWD_LOGITS_ALL : FWD_LOGITS_LAST, logits, &rows,
                       err, sizeof err))
        die("%s", err);
    double ms = (double)(now_ns() - t0) / 1e6;
    logits_report_opts_t ro = {a->model_dir, st->qat, replay, (int)l->top_k, l->json, tok};
    logits_report(stdout, &ro, ids.v, (int64_t)ids.n, logits, rows, (int64_t)ids.n - rows, V);
    if (l->stats) {
        buf_t bytes = {0};
        seqstate_serialize(st, &bytes);
        fprintf(stderr, "%s: %zu tokens in %.1f ms (%.0f tokens/s), %d threads; state %zu bytes\n", STAGE, ids.n, ms,
                (double)ids.n / ms * 1e3, a->threads ? (int)a->threads : tp_default_threads(), bytes.len);
        buf_free(&bytes);
    }
    free(logits);
    seqstate_free(st);
    if (tok) tokenizer_free(tok);
    ids_free(&ids);
    return 0;
}

static void send_frame(void *out, frame_t *f) { frame_out_send(out, f); }
static bool has_room(void *e) { return prefill_has_room(e); }
static bool idle(void *e) { return prefill_pending_tokens(e) == 0; }
static void submit(void *e, frame_t *f, uint64_t in_us) { prefill_submit(e, f, in_us); }
static void step(void *e) { prefill_step(e); }

static int serve_main(const model_args_t *a, int64_t budget, const cli_common_t *common, model_t *m) {
    constraints_opts_t co = {.tokenizer_path = a->tokenizer, .vocab_size = m->cfg.vocab_size, .eos = m->cfg.eos_token_id,
                             .cache_entries = (uint32_t)a->grammar_cache,
                             .threads = a->threads ? (int)a->threads : tp_default_threads()};
    constraints_t *cons = constraints_new(&co);
    stage_stats_t st;
    stats_start(&st, STAGE);
    frame_in_t *in = frame_in_open(common->in, common);
    frame_out_t *out = frame_out_open(common->out, common, STAGE);
    prefill_opts_t po = {m, a->qat, a->replay, budget, a->context, STAGE, send_frame, out, cons};
    prefill_engine_t *pe = prefill_new(&po);
    stage_engine_t se = {STAGE, FRAME_REQUEST, 0, NULL, pe, has_room, idle, submit, step};
    bool ok = stage_loop(&se, in, out, &st);
    frame_in_close(in);
    const prefill_stats_t *ps = prefill_stats(pe);
    st.requests += ps->requests;
    st.errors += ps->errors;
    const io_counters_t out_counters = *frame_out_counters(out);
    frame_out_finish(out, frame_in_ledger(in));
    io_shutdown();
    if (common->stats) {
        stats_print(&st, frame_in_counters(in), &out_counters);
        double fwd = (double)ps->forward_ns / 1e9;
        fprintf(stderr, "%s: stats: prompt_tokens %llu\n", STAGE, (unsigned long long)ps->tokens);
        fprintf(stderr, "%s: stats: forward_calls %llu\n", STAGE, (unsigned long long)ps->calls);
        fprintf(stderr, "%s: stats: forward_s %.6f\n", STAGE, fwd);
        if (fwd > 0) fprintf(stderr, "%s: stats: prefill_tokens_per_s %.1f\n", STAGE, (double)ps->tokens / fwd);
        fprintf(stderr, "%s: stats: mask_s %.6f\n", STAGE, (double)ps->mask_ns / 1e9);
        fprintf(stderr, "%s: stats: serialize_s %.6f\n", STAGE, (double)ps->serialize_ns / 1e9);
        fprintf(stderr, "%s: stats: state_bytes %llu\n", STAGE, (unsigned long long)ps->state_bytes);
        if (ps->tokens)
            fprintf(stderr, "%s: stats: state_bytes_per_prompt_token %.1f\n", STAGE, (double)ps->state_bytes / (double)ps->tokens);
        constraints_print_stats(stderr, STAGE, constraints_stats(cons));
    }
    prefill_free(pe);
    constraints_free(cons);
    frame_in_free(in);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    model_args_t a = {"data/models/tiny-v41", NULL, "cpu", NULL, true, -1, 0, 0, 64};
    logits_args_t l = {NULL, NULL, "last", NULL, false, false, 10, FWD_DEFAULT_CHUNK};
    const char *qat = "on";
    bool logits_mode = false;
    int64_t budget = 512;
    cli_opt_t opts[] = {
        {"model", CLI_STRING, &a.model_dir, "DIR", "checkpoint directory (default data/models/tiny-v41)", 0, 0},
        {"device", CLI_STRING, &a.device, "cpu|cuda:N", "where the model runs (default cpu; cuda: the GPU backend)", 0, 0},
        {"threads", CLI_INT, &a.threads, "N", "CPU threads (default $DI_THREADS or all cores)", 0, 256},
        {"token-budget", CLI_INT, &budget, "N", "prompt tokens per batched forward (default 512)", 1, 1 << 20},
        {"replay", CLI_INT, &a.replay, "N", "bounded replay: later decoder layers only over the last N prompt tokens (default: exact; DeepInfer uses " STR(FWD_DEFAULT_REPLAY) ")", 1, 1ll << 40},
        {"context", CLI_INT, &a.context, "N", "positions a sequence may reach (default and most: the model's max_position_embeddings)", 2, 1ll << 40},
        {"qat", CLI_STRING, &qat, "on|off", "the model's FP8/FP4 rounding simulations (default on, as trained)", 0, 0},
        {"token-map", CLI_STRING, &a.token_map, "PATH", "Engram token map (default: in DIR, else beside the tokenizer)", 0, 0},
        {"logits", CLI_FLAG, &logits_mode, NULL, "instead of serving frames, print the logits of one prompt", 0, 0},
        {"ids", CLI_STRING, &l.ids, "1,2,3", "--logits: the prompt as token ids", 0, 0},
        {"text", CLI_STRING, &l.text, "TEXT", "--logits: the prompt as text (special-token spellings become their ids)", 0, 0},
        {"top-k", CLI_INT, &l.top_k, "N", "--logits: tokens shown per position, by logit (default 10; 0 = every logit)", 0, 1 << 30},
        {"position", CLI_STRING, &l.position, "all|last", "--logits: which positions to print (default last)", 0, 0},
        {"json", CLI_FLAG, &l.json, NULL, "--logits: JSON instead of a table", 0, 0},
        {"tokenizer", CLI_STRING, &a.tokenizer, "PATH", "tokenizer.json for constraints and --logits (default: data/tokenizer/ next to bin/)", 0, 0},
        {"grammar-cache", CLI_INT, &a.grammar_cache, "N", "distinct constraints kept compiled (default 64)", 1, 1 << 20},
        {"chunk", CLI_INT, &l.chunk, "N", "--logits: prefill chunk in tokens (default 512)", 1, 1 << 20},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-prefill",
        .usage = "--model DIR [--device cpu] [--token-budget N] [--replay N]   (request frames in, state frames out)\n"
                 "       di-prefill --model DIR --logits (--ids 1,2,3 | --text \"...\") [--top-k N] [--position all|last]",
        .summary = "The prefill stage: reads request frames, packs prompts into batched forwards of at most --token-budget\n"
                   "tokens, samples each request's first output token and writes one state frame per request: the\n"
                   "sequence state (docs/STATE.md) for di-decode. Exact prefill unless --replay N. Context rule: a prompt\n"
                   "must be shorter than the context (--context, default the model's max_position_embeddings) so that one\n"
                   "output token fits; a longer one gets an error frame (code context_length). Requests with an id\n"
                   "outside the vocabulary or an empty prompt get an error frame too. A constrained request's first token is\n"
                   "drawn within its grammar (docs/GRAMMAR.md); the vocabulary is loaded when the first one arrives.\n"
                   "With --logits it prints the logits of one prompt instead (how to check a checkpoint).",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);
    if (strcmp(qat, "on") && strcmp(qat, "off")) die("--qat must be on or off");
    a.qat = !strcmp(qat, "on");
    if (!logits_mode && (l.ids || l.text)) die("--ids and --text go with --logits");
    char err[1024];
    backend_t *bk = device_open(a.device, (int)a.threads, err, sizeof err);
    if (!bk) die("%s", err);
    model_t m;
    if (model_open(&m, a.model_dir, bk, a.token_map, err, sizeof err)) die("%s", err);
    if (a.context > m.cfg.max_position_embeddings)
        die("--context %lld exceeds the model's max_position_embeddings (%lld)", (long long)a.context,
            (long long)m.cfg.max_position_embeddings);
    if (!a.context) a.context = m.cfg.max_position_embeddings;
    l.stats = common.stats;
    l.tokenizer = a.tokenizer;
    int rc = logits_mode ? logits_main(&a, &l, &m) : serve_main(&a, budget, &common, &m);
    model_close(&m);
    bk->destroy(bk);
    return rc;
}
