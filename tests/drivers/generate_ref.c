/* Test driver: the single-process reference loop the pipeline is checked against
 * (tests/py/test_generate.py). Reads request frames on stdin (di-tokenize's output) and, for
 * each request alone, prefills the prompt exactly, then decodes one token at a time through
 * the same library (forward_prompt, forward_step, sampler.h, finish.h): no batching, no
 * transport. Writes one JSON line per request in input order:
 *
 *   {"id", "tokens": [...], "finish_reason"} or {"id", "error": "context_length"}
 *
 *   generate_ref MODEL_DIR [CONTEXT [DEFAULT_MAX_TOKENS]]   (0 or absent: the defaults of di-decode) */
#include "backend_cpu.h"
#include "finish.h"
#include "forward.h"
#include "io.h"
#include "sampler.h"
#include "tokenizer.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *generate(const model_t *m, sampler_t *smp, const frame_t *req, const finish_limits_t *lim,
                        const tokenizer_t *tok, float *logits) {
    char err[512];
    if ((int64_t)req->n_tokens >= lim->context) return json_pack("{s:s, s:s}", "id", req->id, "error", "context_length");
    seqstate_t *st = seqstate_new(m, true);
    if (forward_prompt(st, req->tokens, req->n_tokens, -1, 0, FWD_LOGITS_LAST, logits, NULL, err, sizeof err)) die("%s", err);
    sampler_params_t sp = sampler_params(&req->params, req->id);
    finish_t fi;
    if (finish_init(&fi, req, req->n_tokens, lim, tok, err, sizeof err)) die("%s", err);
    json_t *out = json_array();
    const char *reason = NULL;
    for (;;) {
        uint32_t t = sampler_pick(smp, &sp, logits, st->T, NULL, NULL);
        json_array_append_new(out, json_integer(t));
        if ((reason = finish_push(&fi, t, true))) break;
        if (forward_step(st, t, logits, err, sizeof err)) die("%s", err);
    }
    json_t *line = json_pack("{s:s, s:o, s:s}", "id", req->id, "tokens", out, "finish_reason", reason);
    finish_free(&fi);
    seqstate_free(st);
    return line;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) die("usage: generate_ref MODEL_DIR [CONTEXT [DEFAULT_MAX_TOKENS]] < request frames");
    char err[512];
    backend_t *bk = backend_cpu_create(0);
    model_t m;
    if (model_open(&m, argv[1], bk, NULL, err, sizeof err)) die("%s", err);
    int64_t context = argc > 2 ? atoll(argv[2]) : 0, max_tokens = argc > 3 ? atoll(argv[3]) : 0;
    finish_limits_t lim = {m.cfg.eos_token_id, max_tokens > 0 ? max_tokens : 16,
                           context > 0 ? context : m.cfg.max_position_embeddings};
    tokenizer_t *tok = tokenizer_load(tokenizer_default_path(), err, sizeof err);
    if (tok && tokenizer_vocab_size(tok) != m.cfg.vocab_size) tokenizer_free(tok), tok = NULL;
    cli_common_t common = {.in = "-", .out = "-", .hwm = 1000, .eos_timeout = 30, .idle_timeout = 10};
    frame_in_t *in = frame_in_open("-", &common);
    sampler_t *smp = sampler_new(m.cfg.vocab_size);
    float *logits = xmalloc((size_t)m.cfg.vocab_size * sizeof(float));
    for (;;) {
        frame_t f;
        in_bad_t bad;
        in_result_t r = frame_in_next(in, &f, &bad);
        if (r == IN_END) break;
        if (r != IN_FRAME) die("bad input: %s", bad.reason);
        if (f.type == FRAME_REQUEST) {
            json_t *line = generate(&m, smp, &f, &lim, tok, logits);
            char *text = json_dumps(line, JSON_COMPACT);
            puts(text);
            free(text);
            json_decref(line);
        }
        frame_free(&f);
    }
    free(logits);
    sampler_free(smp);
    frame_in_free(in);
    if (tok) tokenizer_free(tok);
    model_close(&m);
    bk->destroy(bk);
    return 0;
}
