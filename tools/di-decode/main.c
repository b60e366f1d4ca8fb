/* di-decode: the pipeline's decode stage. State frames in (from any number of di-prefill
 * processes); tokens frames as they are produced and one done frame per request out
 * (lib/decode_engine.h): continuous batching over a fixed memory budget, per-request sampling
 * and stop conditions. */
#include "cli.h"
#include "constraints.h"
#include "decode_engine.h"
#include "device.h"
#include "io.h"
#include "log.h"
#include "stage_loop.h"
#include "stats.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *STAGE = "di-decode";

static void send_frame(void *out, frame_t *f) { frame_out_send(out, f); }
static bool has_room(void *e) { return decode_has_room(e); }
static bool idle(void *e) { return !decode_running(e) && !decode_waiting(e); }
static void submit(void *e, frame_t *f, uint64_t in_us) { decode_submit(e, f, in_us); }
static void step(void *e) { decode_step(e); }

/* The tokenizer that stop strings are matched with: the given one (it must load), else the
 * default one if present; none when its vocabulary is not the model's. */
static tokenizer_t *stop_tokenizer(const char *path, int64_t vocab) {
    char err[512];
    tokenizer_t *tok = tokenizer_load(path ? path : tokenizer_default_path(), err, sizeof err);
    if (!tok && path) die("tokenizer %s: %s", path, err);
    if (tok && tokenizer_vocab_size(tok) != vocab) {
        log_warn("the tokenizer has %u tokens, the model %lld: requests with stop strings will be refused",
                 tokenizer_vocab_size(tok), (long long)vocab);
        tokenizer_free(tok);
        return NULL;
    }
    if (!tok) log_info("no tokenizer (%s): requests with stop strings will be refused", err);
    return tok;
}

/* fp32 bytes of pools and indexer keys per position, summed over the KV-source layers. */
static double pool_bytes_per_token(const model_config_t *c) {
    double b = 0;
    for (int L = 0; L < c->n_layers; L++)
        if (c->layers[L].has_compressor)
            b += 4.0 * (c->head_dim + (c->layers[L].indexer_keys ? c->index_head_dim : 0)) / c->layers[L].ratio;
    return b;
}

static void print_stats(const decode_stats_t *ds, const constraints_stats_t *cs, const model_t *m) {
    double fwd = (double)ds->forward_ns / 1e9;
    fprintf(stderr, "%s: stats: decode_steps %llu\n", STAGE, (unsigned long long)ds->steps);
    fprintf(stderr, "%s: stats: decoded_tokens %llu\n", STAGE, (unsigned long long)ds->tokens);
    if (ds->steps) fprintf(stderr, "%s: stats: mean_batch %.2f\n", STAGE, (double)ds->batch_sum / (double)ds->steps);
    fprintf(stderr, "%s: stats: peak_batch %llu\n", STAGE, (unsigned long long)ds->peak_batch);
    fprintf(stderr, "%s: stats: peak_pool_tokens %llu\n", STAGE, (unsigned long long)ds->peak_pool);
    fprintf(stderr, "%s: stats: pool_bytes_per_token %.1f\n", STAGE, pool_bytes_per_token(&m->cfg));
    long long page_bytes = (long long)(pagepool_bytes(m->pool_pages) + pagepool_bytes(m->key_pages));
    fprintf(stderr, "%s: stats: state_page_bytes %lld\n", STAGE, page_bytes);
    fprintf(stderr, "%s: stats: forward_s %.6f\n", STAGE, fwd);
    if (fwd > 0) fprintf(stderr, "%s: stats: decode_tokens_per_s %.1f\n", STAGE, (double)ds->tokens / fwd);
    fprintf(stderr, "%s: stats: deserialize_s %.6f\n", STAGE, (double)ds->deserialize_ns / 1e9);
    if (ds->requests) fprintf(stderr, "%s: stats: mean_queue_s %.6f\n", STAGE, (double)ds->queue_ns / 1e9 / (double)ds->requests);
    constraints_print_stats(stderr, STAGE, cs);
    if (!ds->grammar_tokens) return;
    fprintf(stderr, "%s: stats: grammar_tokens %llu\n", STAGE, (unsigned long long)ds->grammar_tokens);
    fprintf(stderr, "%s: stats: grammar_us_per_token %.3f\n", STAGE, (double)ds->grammar_ns / 1e3 / (double)ds->grammar_tokens);
    fprintf(stderr, "%s: stats: grammar_max_us %.3f\n", STAGE, (double)ds->grammar_max_ns / 1e3);
    fprintf(stderr, "%s: stats: grammar_forced_ends %llu\n", STAGE, (unsigned long long)ds->forced_ends);
}

int main(int argc, char **argv) {
    const char *model_dir = "data/models/tiny-v41", *device = "cpu", *tokenizer_path = NULL, *token_map = NULL;
    int64_t threads = 0, max_batch = 64, pool_tokens = 1 << 20, context = 0, max_tokens = 16, grammar_cache = 64;
    cli_opt_t opts[] = {
        {"model", CLI_STRING, &model_dir, "DIR", "checkpoint directory (default data/models/tiny-v41)", 0, 0},
        {"device", CLI_STRING, &device, "cpu|cuda:N", "where the model runs (default cpu; cuda: the GPU backend)", 0, 0},
        {"threads", CLI_INT, &threads, "N", "CPU threads (default $DI_THREADS or all cores)", 0, 256},
        {"max-batch", CLI_INT, &max_batch, "N", "sequences decoded together per step (default 64)", 1, 1 << 16},
        {"pool-tokens", CLI_INT, &pool_tokens, "N", "state positions held at once over all sequences (default 1048576)", 1, 1ll << 40},
        {"context", CLI_INT, &context, "N", "positions a sequence may reach (default and most: the model's max_position_embeddings)", 2, 1ll << 40},
        {"max-tokens", CLI_INT, &max_tokens, "N", "output tokens for a request that sets no max_tokens (default 16)", 1, 1ll << 40},
        {"tokenizer", CLI_STRING, &tokenizer_path, "PATH", "tokenizer.json for stop strings and constraints (default: data/tokenizer/ next to bin/)", 0, 0},
        {"grammar-cache", CLI_INT, &grammar_cache, "N", "distinct constraints kept compiled (default 64)", 1, 1 << 20},
        {"token-map", CLI_STRING, &token_map, "PATH", "Engram token map (default: in DIR, else beside the tokenizer)", 0, 0},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-decode",
        .usage = "--model DIR [--device cpu] [--max-batch N] [--pool-tokens N]   (state frames in, tokens/done frames out)",
        .summary = "The decode stage: takes state frames from di-prefill, continues every sequence with continuous batching\n"
                   "(sequences join and leave between steps) and streams tokens frames as they are produced, then a done\n"
                   "frame with the finish reason and usage. Sampling per request (temperature, top_k, top_p, min_p, seed;\n"
                   "the random stream is keyed by seed and position, so batching never changes an output). Generation stops\n"
                   "at the end-of-sentence token, a stop token id or a stop string (\"stop\"), or at max_tokens or the\n"
                   "context (\"length\": prompt + output tokens reach --context, default the model's max_position_embeddings).\n"
                   "Constrained requests (response_format, compiled by di-grammar) sample within the tokens their grammar\n"
                   "allows (docs/GRAMMAR.md); the vocabulary is loaded when the first one arrives.\n"
                   "Memory: each admitted sequence reserves prompt + min(max_tokens, context - prompt) positions of\n"
                   "--pool-tokens (pools of pool_bytes_per_token each, see --stats) besides its window rows; states that\n"
                   "do not fit wait in arrival order. A state from another model, truncated or corrupted gets an error frame.",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);
    char err[1024];
    backend_t *bk = device_open(device, (int)threads, err, sizeof err);
    if (!bk) die("%s", err);
    model_t m;
    if (model_open(&m, model_dir, bk, token_map, err, sizeof err)) die("%s", err);
    if (context > m.cfg.max_position_embeddings)
        die("--context %lld exceeds the model's max_position_embeddings (%lld)", (long long)context,
            (long long)m.cfg.max_position_embeddings);
    if (!context) context = m.cfg.max_position_embeddings;
    tokenizer_t *tok = stop_tokenizer(tokenizer_path, m.cfg.vocab_size);

    stage_stats_t st;
    stats_start(&st, STAGE);
    frame_in_t *in = frame_in_open(common.in, &common);
    frame_out_t *out = frame_out_open(common.out, &common, STAGE);
    constraints_opts_t co = {.tok = tok, .tokenizer_path = tokenizer_path, .vocab_size = m.cfg.vocab_size,
                             .eos = m.cfg.eos_token_id, .cache_entries = (uint32_t)grammar_cache,
                             .threads = threads ? (int)threads : tp_default_threads()};
    constraints_t *cons = constraints_new(&co);
    decode_opts_t o = {&m, max_batch, pool_tokens, {m.cfg.eos_token_id, max_tokens, context}, tok, STAGE, send_frame, out, cons};
    decode_engine_t *de = decode_new(&o);
    stage_engine_t se = {STAGE, FRAME_STATE, FRAME_REQUEST,
                         "a request frame reached di-decode: the pipeline has no di-prefill before it", de, has_room, idle,
                         submit, step};
    bool ok = stage_loop(&se, in, out, &st);
    frame_in_close(in);
    const decode_stats_t *ds = decode_stats(de);
    st.requests += ds->requests;
    st.errors += ds->errors;
    const io_counters_t out_counters = *frame_out_counters(out);
    frame_out_finish(out, frame_in_ledger(in));
    io_shutdown();
    if (common.stats) {
        stats_print(&st, frame_in_counters(in), &out_counters);
        print_stats(ds, constraints_stats(cons), &m);
    }
    decode_free(de);
    constraints_free(cons);
    frame_in_free(in);
    if (tok) tokenizer_free(tok);
    model_close(&m);
    bk->destroy(bk);
    return ok ? 0 : 1;
}
