/* di-prefill: runs prompts through the model. For now one mode, --logits: prefill the given
 * token ids or text and print the logits (top-k with probabilities, or all) of the last or
 * every position, as a table or JSON. The frame-serving mode (request frames in, state frames
 * out) arrives with issue 4. */
#include "backend_cpu.h"
#include "cli.h"
#include "forward.h"
#include "threadpool.h"
#include "logits_report.h"
#include "seqstate_io.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define REPLAY_DEFAULT STR(FWD_DEFAULT_REPLAY)

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

int main(int argc, char **argv) {
    const char *model_dir = "data/models/tiny-v41", *ids_arg = NULL, *text = NULL, *position = "last", *qat = "on";
    const char *tokenizer_path = NULL, *token_map = NULL;
    bool logits_mode = false, json = false;
    int64_t top_k = 10, replay = -1, threads = 0, chunk = FWD_DEFAULT_CHUNK;
    cli_opt_t opts[] = {
        {"model", CLI_STRING, &model_dir, "DIR", "checkpoint directory (default data/models/tiny-v41)", 0, 0},
        {"logits", CLI_FLAG, &logits_mode, NULL, "print logits of a prompt (the only mode until issue 4)", 0, 0},
        {"ids", CLI_STRING, &ids_arg, "1,2,3", "the prompt as token ids", 0, 0},
        {"text", CLI_STRING, &text, "TEXT", "the prompt as text (special-token spellings become their ids)", 0, 0},
        {"top-k", CLI_INT, &top_k, "N", "tokens shown per position, by logit (default 10; 0 = every logit)", 0, 1 << 30},
        {"position", CLI_STRING, &position, "all|last", "which positions to print (default last)", 0, 0},
        {"qat", CLI_STRING, &qat, "on|off", "the model's FP8/FP4 rounding simulations (default on, as trained)", 0, 0},
        {"replay", CLI_INT, &replay, "N", "bounded replay: later decoder layers only over the last N prompt tokens (DeepInfer uses " REPLAY_DEFAULT "; default: exact)", 1, 1ll << 40},
        {"json", CLI_FLAG, &json, NULL, "JSON instead of a table", 0, 0},
        {"tokenizer", CLI_STRING, &tokenizer_path, "PATH", "tokenizer.json (default: data/tokenizer/ next to bin/)", 0, 0},
        {"token-map", CLI_STRING, &token_map, "PATH", "Engram token map (default: in DIR, else beside the tokenizer)", 0, 0},
        {"threads", CLI_INT, &threads, "N", "CPU threads (default $DI_THREADS or all cores)", 0, 256},
        {"chunk", CLI_INT, &chunk, "N", "prefill chunk in tokens (default 512)", 1, 1 << 20},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-prefill",
        .usage = "--model DIR --logits (--ids 1,2,3 | --text \"...\") [--top-k N] [--position all|last] [--qat on|off] [--replay N]",
        .summary = "Runs a prompt through the model on the CPU (exact fp32) and prints its logits: the top-k tokens with\n"
                   "logit and probability, or every logit, for the last or every position. This is how to check a\n"
                   "checkpoint. The frame-serving mode (request frames in, sequence-state frames out, the pipeline's\n"
                   "prefill stage) arrives with issue 4.",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);
    if (!logits_mode) die("only the --logits mode exists yet (frame serving arrives with issue 4); see --help");
    if (!ids_arg == !text) die("give the prompt with exactly one of --ids or --text");
    if (strcmp(position, "all") && strcmp(position, "last")) die("--position must be all or last");
    if (strcmp(qat, "on") && strcmp(qat, "off")) die("--qat must be on or off");

    char err[1024];
    tokenizer_t *tok = NULL;
    const char *tpath = tokenizer_path ? tokenizer_path : tokenizer_default_path();
    if (text || tokenizer_path) {
        tok = tokenizer_load(tpath, err, sizeof err);
        if (!tok) die("tokenizer %s: %s", tpath, err);
    }
    ids_t ids = {0};
    if (ids_arg) parse_ids(ids_arg, &ids);
    else if (tokenizer_encode_with_added(tok, text, strlen(text), &ids) || !ids.n)
        die("--text: cannot tokenize it (invalid UTF-8, or empty)");

    backend_t *bk = backend_cpu_create((int)threads);
    model_t m;
    if (model_open(&m, model_dir, bk, token_map, err, sizeof err)) die("%s", err);
    int64_t V = m.cfg.vocab_size;
    if (!tok && V == 129280) tok = tokenizer_load(tpath, err, sizeof err); /* token text when the vocabularies match */
    if (tok && tokenizer_vocab_size(tok) != V) {
        tokenizer_free(tok);
        tok = NULL;
    }
    if (replay > (int64_t)ids.n) replay = (int64_t)ids.n;
    bool all = !strcmp(position, "all");
    seqstate_t *st = seqstate_new(&m, !strcmp(qat, "on"));
    float *logits = xmalloc((size_t)(all ? ids.n : 1) * (size_t)V * sizeof(float));
    int64_t rows = 0;
    uint64_t t0 = now_ns();
    if (forward_prompt(st, ids.v, (int64_t)ids.n, replay, chunk, all ? FWD_LOGITS_ALL : FWD_LOGITS_LAST, logits, &rows, err,
                       sizeof err))
        die("%s", err);
    double ms = (double)(now_ns() - t0) / 1e6;
    if (common.stats) {
        buf_t bytes = {0};
        seqstate_serialize(st, &bytes);
        fprintf(stderr, "di-prefill: %zu tokens in %.1f ms (%.0f tokens/s), %d threads; state %zu bytes\n", ids.n, ms,
                (double)ids.n / ms * 1e3, threads ? (int)threads : tp_default_threads(), bytes.len);
        buf_free(&bytes);
    }
    logits_report_opts_t ro = {model_dir, st->qat, replay, (int)top_k, json, tok};
    logits_report(stdout, &ro, ids.v, (int64_t)ids.n, logits, rows, (int64_t)ids.n - rows, V);
    free(logits);
    seqstate_free(st);
    model_close(&m);
    bk->destroy(bk);
    if (tok) tokenizer_free(tok);
    ids_free(&ids);
    return 0;
}
