/* CPU forward speed: prefill tokens/s over a random prompt (exact, and with bounded replay),
 * then the time of single decode steps; best of --repeat passes. With --replay it also prints
 * how far the replayed prefill's last logits are from the exact ones.
 *
 *   forward_bench [--model DIR] [--prompt N] [--steps N] [--threads N] [--replay N] [--qat on|off] [--repeat N] */
#include "backend_cpu.h"
#include "forward.h"
#include "threadpool.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t arg_i64(const char *flag, const char *v) {
    int64_t x;
    if (!v || !parse_i64(v, 0, 1 << 30, &x)) die("%s needs a number", flag);
    return x;
}

/* Prefill of the prompt; returns the best seconds over repeat passes and leaves the last
 * pass's state in *keep (caller frees) and its last logits in logits. */
static double prefill(const model_t *m, bool qat, const uint32_t *ids, int64_t n, int64_t replay, int repeat,
                      seqstate_t **keep, float *logits) {
    double best = 1e30;
    char err[256];
    for (int r = 0; r < repeat; r++) {
        seqstate_t *st = seqstate_new(m, qat);
        uint64_t t0 = now_ns();
        if (forward_prompt(st, ids, n, replay, FWD_DEFAULT_CHUNK, FWD_LOGITS_LAST, logits, NULL, err, sizeof err)) die("%s", err);
        double s = (double)(now_ns() - t0) / 1e9;
        best = s < best ? s : best;
        if (r + 1 < repeat) seqstate_free(st);
        else *keep = st;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *model_dir = "data/models/tiny-v41";
    int64_t n = 512, steps = 64, threads = 0, replay = -1, repeat = 3;
    bool qat = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) model_dir = argv[++i];
        else if (!strcmp(a, "--prompt")) n = arg_i64(a, v), i++;
        else if (!strcmp(a, "--steps")) steps = arg_i64(a, v), i++;
        else if (!strcmp(a, "--threads")) threads = arg_i64(a, v), i++;
        else if (!strcmp(a, "--replay")) replay = arg_i64(a, v), i++;
        else if (!strcmp(a, "--repeat")) repeat = arg_i64(a, v) ? arg_i64(a, v) : 1, i++;
        else if (!strcmp(a, "--qat") && v) qat = strcmp(argv[++i], "off") != 0;
        else die("unknown argument %s (see the comment at the top of bench/forward_bench.c)", a);
    }
    char err[1024];
    backend_t *bk = backend_cpu_create((int)threads);
    model_t m;
    if (model_open(&m, model_dir, bk, NULL, err, sizeof err)) die("%s", err);
    int64_t V = m.cfg.vocab_size;
    uint32_t *ids = xmalloc((size_t)(n + steps) * 4);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n + steps; i++) s = s * 6364136223846793005ull + 1442695040888963407ull, ids[i] = (uint32_t)((s >> 33) % (uint64_t)V);
    float *exact = xmalloc((size_t)V * 4), *lg = xmalloc((size_t)V * 4);
    seqstate_t *st;
    printf("model %s, %d threads, QAT %s, prompt %lld tokens\n", model_dir, threads ? (int)threads : tp_default_threads(),
           qat ? "on" : "off", (long long)n);
    double t = prefill(&m, qat, ids, n, -1, (int)repeat, &st, exact);
    printf("prefill exact:    %8.1f ms  %8.0f tokens/s\n", t * 1e3, (double)n / t);
    if (replay >= 0) {
        seqstate_t *rs;
        double tr = prefill(&m, qat, ids, n, replay, (int)repeat, &rs, lg);
        double d = 0, sc = 0;
        for (int64_t v = 0; v < V; v++) d = fmax(d, fabs(lg[v] - exact[v])), sc = fmax(sc, fabs(exact[v]));
        printf("prefill replay %lld: %6.1f ms  %8.0f tokens/s  (last logits: max|d|/max|logit| %.2e)\n", (long long)replay,
               tr * 1e3, (double)n / tr, d / sc);
        seqstate_free(rs);
    }
    double best = 1e30, total = 0;
    for (int64_t k = 0; k < steps; k++) {
        uint64_t t0 = now_ns();
        if (forward_step(st, ids[n + k], lg, err, sizeof err)) die("%s", err);
        double dt = (double)(now_ns() - t0) / 1e6;
        total += dt;
        best = dt < best ? dt : best;
    }
    if (steps) printf("decode step:      %8.2f ms mean, %.2f ms best over %lld steps (%.0f tokens/s)\n", total / (double)steps, best,
                      (long long)steps, (double)steps / total * 1e3);
    seqstate_free(st);
    model_close(&m);
    bk->destroy(bk);
    free(ids), free(exact), free(lg);
    return 0;
}
