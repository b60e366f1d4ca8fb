/* The CPU forward against the committed goldens (tests/golden/README.md) and against itself:
 *  (a) QAT off: HF fp32 logits, relative L2 <= 1e-4 at every position, same argmax, both tiny
 *      configurations, both sequences; the bf16 variant gives the fp8 variant's logits exactly;
 *  (b) QAT on: the fp64 reference and HF fp32, with the rounding flips accounted for: every
 *      position before the first flip matches, the flips start where pinned, argmax agreement;
 *  (c) prefill of k tokens then single steps reproduces the one-shot logits bit for bit, for k
 *      at and around every window, group, candidate-block and top-k boundary; the same through
 *      serialize -> deserialize, whose bytes reproduce exactly;
 *  (d) bounded replay: deviation from exact prefill and greedy agreement over 64 tokens, pinned;
 *  plus refusals: bad token ids, states of another model, corrupt states. */
#include "backend_cpu.h"
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

typedef struct {
    const char *name, *preset;
    int vocab, seed;
    model_t m;
    json_t *index; /* its entry in index.json */
} cfg_t;

static cfg_t cfgs[2] = {{.name = "tiny-a", .preset = "a", .vocab = 512, .seed = 7},
                        {.name = "tiny-b", .preset = "b", .vocab = 320, .seed = 9}};
static char tmp[64] = "/tmp/di-fwd-XXXXXX", err[512];
static backend_t *bk;
static json_t *index_json;

static bool make_model(cfg_t *c, const char *variant, char *dir, size_t n) {
    snprintf(dir, n, "%s/%s-%s", tmp, c->name, variant);
    return t_tiny_model(dir, c->preset, c->vocab, (uint64_t)c->seed, !strcmp(variant, "fp8"), err, sizeof err) == 0;
}

static float *golden(cfg_t *c, const char *key, size_t n) {
    float *v = t_golden_floats(c->name, key, n * (size_t)c->vocab);
    CHECKF(v, "golden %s.%s missing or not %zu x %d floats", c->name, key, n, c->vocab);
    return v;
}

/* One-shot prefill with every position's logits. */
static float *run(cfg_t *c, const uint32_t *ids, size_t n, bool qat) {
    float *lg = xmalloc(n * (size_t)c->vocab * 4);
    seqstate_t *st = seqstate_new(&c->m, qat);
    int64_t got = 0;
    CHECKF(forward_prefill(st, ids, (int64_t)n, -1, FWD_LOGITS_ALL, lg, &got, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(got, n);
    seqstate_free(st);
    return lg;
}

/* ---- (a) QAT off --------------------------------------------------------------------------- */
static void test_golden_qat_off(void) {
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        for (int s = 0; s < 2; s++) {
            const char *seq = s ? "repeat" : "long";
            size_t n;
            uint32_t *ids = t_golden_sequence(c->index, seq, &n);
            char key[64];
            snprintf(key, sizeof key, "qat_off.%s.logits", seq);
            float *gold = golden(c, key, n), *lg = run(c, ids, n, false);
            double worst = 0;
            size_t wpos = 0, agree = 0;
            for (size_t p = 0; gold && p < n; p++) {
                double r = t_rel_l2(lg + p * c->vocab, gold + p * c->vocab, c->vocab);
                if (r > worst) worst = r, wpos = p;
                agree += t_argmax(lg + p * c->vocab, c->vocab) == t_argmax(gold + p * c->vocab, c->vocab);
            }
            printf("  %s %s (%zu positions) QAT off vs HF: worst relative L2 %.2e at %zu, argmax %zu/%zu\n", c->name, seq, n,
                   worst, wpos, agree, n);
            CHECKF(gold && worst <= 1e-4, "%s %s: relative L2 %.3g at %zu", c->name, seq, worst, wpos);
            CHECK_EQ(agree, n);
            free(ids), free(gold), free(lg);
        }
    }
}

static void test_bf16_variant_same_logits(void) {
    char dir[128];
    CHECKF(make_model(&cfgs[0], "bf16", dir, sizeof dir), "%s", err);
    model_t m16;
    CHECKF(model_open(&m16, dir, bk, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(m16.w.layers[0].attn.wq_a.kind == WQ_BF16 && cfgs[0].m.w.layers[0].attn.wq_a.kind == WQ_FP8);
    CHECK(m16.fingerprint != cfgs[0].m.fingerprint); /* another checkpoint, even if the same numbers */
    size_t n;
    uint32_t *ids = t_golden_sequence(cfgs[0].index, "repeat", &n);
    float *a = run(&cfgs[0], ids, n, true);
    model_t keep = cfgs[0].m;
    cfgs[0].m = m16;
    float *b = run(&cfgs[0], ids, n, true);
    cfgs[0].m = keep;
    CHECK(!memcmp(a, b, n * (size_t)cfgs[0].vocab * 4));
    model_close(&m16);
    free(ids), free(a), free(b);
}

/* ---- (b) QAT on ----------------------------------------------------------------------------- */
/* Pinned from the measurement: where this fp32 forward first leaves the fp64 reference (a
 * rounding decision decided the other way), and where HF fp32 first left it (index.json). */
static const int first_flip_vs_ref64[2] = {158, -1}; /* -1: none in the sequence */

static void test_golden_qat_on(void) {
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        size_t n;
        uint32_t *ids = t_golden_sequence(c->index, "long", &n);
        float *ref = golden(c, "qat_on.long.ref64", n), *hf = golden(c, "qat_on.long.logits", n);
        float *lg = run(c, ids, n, true);
        int hf_flip = (int)json_integer_value(json_object_get(json_object_get(json_object_get(c->index, "checks"), "qat_on.long"), "first_flip"));
        /* a flip shows as a jump: before it the fp32-vs-fp64 level, from it on a lasting offset */
        int flip = -1;
        double before = 0, after = 0, before_hf = 0;
        size_t agree_ref = 0, agree_hf = 0;
        for (size_t p = 0; ref && hf && p < n; p++) {
            double r = t_rel_l2(lg + p * c->vocab, ref + p * c->vocab, c->vocab);
            if (flip < 0 && r > 1e-5) flip = (int)p;
            if (flip < 0) before = fmax(before, r);
            else after = fmax(after, r);
            if ((int)p < hf_flip) before_hf = fmax(before_hf, t_rel_l2(lg + p * c->vocab, hf + p * c->vocab, c->vocab));
            agree_ref += t_argmax(lg + p * c->vocab, c->vocab) == t_argmax(ref + p * c->vocab, c->vocab);
            agree_hf += t_argmax(lg + p * c->vocab, c->vocab) == t_argmax(hf + p * c->vocab, c->vocab);
        }
        printf("  %s QAT on vs fp64 reference: %.2e before the first flip (position %d), %.2e from it on; argmax %zu/%zu\n",
               c->name, before, flip, after, agree_ref, n);
        printf("  %s QAT on vs HF fp32: %.2e before HF's first flip (%d); argmax %zu/%zu\n", c->name, before_hf, hf_flip,
               agree_hf, n);
        CHECKF(before <= 1e-5, "%s: %.3g before the first flip", c->name, before);
        CHECKF(flip == first_flip_vs_ref64[i], "%s: first flip at %d, pinned %d", c->name, flip, first_flip_vs_ref64[i]);
        CHECKF(after <= 1e-3, "%s: %.3g after the flip: more than a rounding flip", c->name, after);
        CHECKF(before_hf <= 1e-4, "%s: %.3g vs HF before its first flip", c->name, before_hf);
        CHECK(agree_ref >= n - 1 && agree_hf >= n - 3);
        free(ids), free(ref), free(hf), free(lg);
    }
}

/* ---- (c) chunking and the state ------------------------------------------------------------ */
#define CHUNK_N 60

/* Prefill positions at and around the boundaries that matter for this config. */
static int boundaries(const cfg_t *c, int *k) {
    const model_config_t *mc = &c->m.cfg;
    int n = 0, marks[] = {1, 2, mc->sliding_window, 2 * mc->sliding_window,
                          mc->candidate_block_size * mc->candidate_topk_blocks, mc->index_topk, 2 * mc->index_topk,
                          CHUNK_N - 2};
    for (size_t i = 0; i < DI_ARRAY_LEN(marks); i++)
        for (int d = -1; d <= 1; d++) {
            int v = marks[i] + d;
            bool dup = v < 1 || v >= CHUNK_N;
            for (int j = 0; j < n && !dup; j++) dup = k[j] == v;
            if (!dup) k[n++] = v;
        }
    return n;
}

static uint32_t *random_ids(int n, int vocab, unsigned seed) {
    uint32_t *ids = xmalloc((size_t)n * 4);
    srand(seed);
    for (int i = 0; i < n; i++) ids[i] = (uint32_t)(rand() % vocab);
    return ids;
}

/* Continues st with up to `steps` single steps (not past CHUNK_N), checking each step's
 * logits against ref. */
static int steps_match(seqstate_t *st, const uint32_t *ids, const float *ref, int V, int steps) {
    float *lg = xmalloc((size_t)V * 4);
    int bad = 0;
    for (int p = (int)st->T; p < CHUNK_N && steps-- > 0; p++) {
        CHECKF(forward_step(st, ids[p], lg, err, sizeof err) == 0, "%s", err);
        bad += memcmp(lg, ref + (size_t)p * V, (size_t)V * 4) != 0;
    }
    free(lg);
    return bad;
}

static void test_chunks_and_steps_match_oneshot(void) {
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        uint32_t *ids = random_ids(CHUNK_N, c->vocab, 11 + i);
        float *one = run(c, ids, CHUNK_N, true);
        int ks[64], nk = boundaries(c, ks), bad_k = 0;
        for (int j = 0; j < nk; j++) {
            int k = ks[j];
            seqstate_t *st = seqstate_new(&c->m, true);
            float *pl = xmalloc((size_t)k * c->vocab * 4);
            CHECK(forward_prefill(st, ids, k, -1, FWD_LOGITS_ALL, pl, NULL, err, sizeof err) == 0);
            int bad = memcmp(pl, one, (size_t)k * c->vocab * 4) != 0;
            bad += steps_match(st, ids, one, c->vocab, CHUNK_N);
            CHECKF(!bad, "%s: prefill %d then steps: %d positions differ from one-shot", c->name, k, bad);
            bad_k += bad != 0;
            seqstate_free(st);
            free(pl);
        }
        /* uneven chunks, last logits only */
        int splits[] = {5, 3, 17, 1, 9, 25};
        seqstate_t *st = seqstate_new(&c->m, true);
        float *lg = xmalloc((size_t)c->vocab * 4);
        int p = 0, bad = 0;
        for (size_t s = 0; s < DI_ARRAY_LEN(splits); p += splits[s++]) {
            CHECK(forward_prefill(st, ids + p, splits[s], -1, FWD_LOGITS_LAST, lg, NULL, err, sizeof err) == 0);
            bad += memcmp(lg, one + (size_t)(p + splits[s] - 1) * c->vocab, (size_t)c->vocab * 4) != 0;
        }
        CHECK_EQ(p, CHUNK_N);
        CHECK_EQ(bad, 0);
        printf("  %s: one-shot == prefill k + steps for %d values of k (%d differ), == chunks 5+3+17+1+9+25\n", c->name, nk, bad_k);
        seqstate_free(st);
        free(lg), free(ids), free(one);
    }
}

static void test_state_roundtrip(void) {
    for (int i = 0; i < 2; i++) {
        cfg_t *c = &cfgs[i];
        uint32_t *ids = random_ids(CHUNK_N, c->vocab, 21 + i);
        for (int qat = 0; qat < 2; qat++) {
            float *one = run(c, ids, CHUNK_N, qat);
            int ks[64], nk = boundaries(c, ks), bad_k = 0;
            size_t bytes_at_max = 0;
            for (int j = 0; j < nk; j++) {
                int k = ks[j];
                seqstate_t *st = seqstate_new(&c->m, qat);
                CHECK(forward_prefill(st, ids, k, -1, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
                buf_t a = {0}, b = {0};
                seqstate_serialize(st, &a);
                seqstate_free(st);
                seqstate_t *back = seqstate_deserialize(&c->m, a.data, a.len, err, sizeof err);
                CHECKF(back, "%s k=%d: %s", c->name, k, err);
                if (!back) continue;
                seqstate_serialize(back, &b);
                CHECKF(a.len == b.len && !memcmp(a.data, b.data, a.len), "%s k=%d: bytes differ after a round trip", c->name, k);
                int bad = steps_match(back, ids, one, c->vocab, 6);
                CHECKF(!bad, "%s k=%d qat=%d: %d positions differ after deserialize", c->name, k, qat, bad);
                bad_k += bad != 0;
                if (a.len > bytes_at_max) bytes_at_max = a.len;
                seqstate_free(back);
                buf_free(&a);
                buf_free(&b);
            }
            printf("  %s QAT %s: serialize -> deserialize -> 6 steps == one-shot for %d values of k (%d differ); largest state %zu bytes\n",
                   c->name, qat ? "on" : "off", nk, bad_k, bytes_at_max);
            free(one);
        }
        free(ids);
    }
}

/* A state taken mid-prompt and after a replayed prefill (decoder windows starting late) carries
 * on exactly like the state it was copied from. */
static void test_state_after_replay(void) {
    cfg_t *c = &cfgs[1];
    uint32_t *ids = random_ids(70, c->vocab, 9);
    int V = c->vocab;
    float *a = xmalloc((size_t)V * 4), *b = xmalloc((size_t)V * 4);
    for (int cut = 0; cut < 2; cut++) {
        /* cut 0: after 24 of 50 prompt tokens (decoder layers not run yet); cut 1: after the prompt */
        seqstate_t *st = seqstate_new(&c->m, true);
        int first = cut ? 50 : 24;
        CHECK(forward_prefill(st, ids, first, 30, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
        buf_t bytes = {0};
        seqstate_serialize(st, &bytes);
        seqstate_t *copy = seqstate_deserialize(&c->m, bytes.data, bytes.len, err, sizeof err);
        CHECKF(copy, "%s", err);
        if (!copy) continue;
        if (!cut) {
            CHECK(forward_prefill(st, ids + 24, 26, 30, FWD_LOGITS_LAST, a, NULL, err, sizeof err) == 0);
            CHECK(forward_prefill(copy, ids + 24, 26, 30, FWD_LOGITS_LAST, b, NULL, err, sizeof err) == 0);
            CHECK(!memcmp(a, b, (size_t)V * 4));
        }
        CHECK(st->layers[c->m.cfg.n_layers - 1].win_lo == 30);
        int bad = 0;
        for (int p = 50; p < 70; p++) {
            CHECK(forward_step(st, ids[p], a, err, sizeof err) == 0 && forward_step(copy, ids[p], b, err, sizeof err) == 0);
            bad += memcmp(a, b, (size_t)V * 4) != 0;
        }
        CHECK_EQ(bad, 0);
        seqstate_free(st);
        seqstate_free(copy);
        buf_free(&bytes);
    }
    free(a), free(b), free(ids);
}

/* With QAT on the packed sections make the state about 4x smaller than fp32. */
static void test_state_packed_size(void) {
    cfg_t *c = &cfgs[0];
    uint32_t *ids = random_ids(64, c->vocab, 5);
    size_t len[2];
    for (int qat = 0; qat < 2; qat++) {
        seqstate_t *st = seqstate_new(&c->m, qat);
        CHECK(forward_prefill(st, ids, 64, -1, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
        buf_t b = {0};
        seqstate_serialize(st, &b);
        len[qat] = b.len;
        buf_free(&b);
        seqstate_free(st);
    }
    printf("  tiny-a state after 64 tokens: %zu bytes fp32 (QAT off), %zu bytes packed (QAT on)\n", len[0], len[1]);
    CHECK(len[1] * 3 < len[0]);
    free(ids);
}

static void test_state_refusals(void) {
    cfg_t *c = &cfgs[0];
    uint32_t *ids = random_ids(40, c->vocab, 3);
    seqstate_t *st = seqstate_new(&c->m, true);
    CHECK(forward_prefill(st, ids, 37, -1, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
    buf_t b = {0};
    seqstate_serialize(st, &b);
    seqstate_t *x = seqstate_deserialize(&cfgs[1].m, b.data, b.len, err, sizeof err);
    CHECK(!x && strstr(err, "another model"));
    for (size_t cut = 0; cut < b.len; cut += 1 + cut / 3) { /* every truncation */
        x = seqstate_deserialize(&c->m, b.data, cut, err, sizeof err);
        CHECKF(!x && strstr(err, "truncated"), "cut at %zu: %s", cut, x ? "accepted" : err);
        seqstate_free(x);
    }
    int flipped_ok = 0;
    for (size_t at = 0; at < b.len; at += 7) { /* a flipped byte anywhere is caught */
        b.data[at] ^= 0x20;
        x = seqstate_deserialize(&c->m, b.data, b.len, err, sizeof err);
        flipped_ok += x != NULL;
        seqstate_free(x);
        b.data[at] ^= 0x20;
    }
    CHECK_EQ(flipped_ok, 0);
    buf_putc(&b, 0);
    x = seqstate_deserialize(&c->m, b.data, b.len, err, sizeof err);
    CHECK(!x && strstr(err, "after the end"));
    buf_free(&b);
    seqstate_free(st);
    free(ids);
}

static void test_bad_token_refused(void) {
    cfg_t *c = &cfgs[0];
    seqstate_t *st = seqstate_new(&c->m, true);
    uint32_t ids[3] = {1, (uint32_t)c->vocab, 2};
    CHECK(forward_prefill(st, ids, 3, -1, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "outside the vocabulary") && st->T == 0);
    seqstate_free(st);
}

/* ---- (d) bounded replay -------------------------------------------------------------------- */
#define REPLAY_PROMPT 200
#define REPLAY_GEN 64

typedef struct {
    double last_rel, max_rel;
    int agree;
} replay_t;

/* Greedy continuation of REPLAY_GEN tokens after a prompt, exact or with bounded replay. */
static void greedy(cfg_t *c, const uint32_t *prompt, int64_t replay, uint32_t *out, float *logits) {
    seqstate_t *st = seqstate_new(&c->m, true);
    int V = c->vocab;
    CHECK(forward_prompt(st, prompt, REPLAY_PROMPT, replay, 64, FWD_LOGITS_LAST, logits, NULL, err, sizeof err) == 0);
    for (int t = 0; t < REPLAY_GEN; t++) {
        out[t] = (uint32_t)t_argmax(logits + (size_t)t * V, V);
        if (t + 1 < REPLAY_GEN) CHECK(forward_step(st, out[t], logits + (size_t)(t + 1) * V, err, sizeof err) == 0);
    }
    seqstate_free(st);
}

/* ex, ex_tok: the exact run's logits and tokens. */
static replay_t replay_vs_exact(cfg_t *c, const uint32_t *prompt, int64_t n, const float *ex, const uint32_t *ex_tok) {
    int V = c->vocab;
    uint32_t rp_tok[REPLAY_GEN];
    float *rp = xmalloc((size_t)REPLAY_GEN * V * 4);
    greedy(c, prompt, n, rp_tok, rp);
    replay_t r = {0};
    double scale = 0;
    for (int v = 0; v < V; v++) scale = fmax(scale, fabs(ex[v]));
    for (int v = 0; v < V; v++) r.last_rel = fmax(r.last_rel, fabs(ex[v] - rp[v]) / scale);
    while (r.agree < REPLAY_GEN && ex_tok[r.agree] == rp_tok[r.agree]) r.agree++;
    /* teacher-forced comparison only while both continue the same tokens */
    for (int t = 0; t < r.agree; t++)
        for (int v = 0; v < V; v++) r.max_rel = fmax(r.max_rel, fabs(ex[(size_t)t * V + v] - rp[(size_t)t * V + v]) / scale);
    free(rp);
    return r;
}

/* Pinned ranges (the weights were not trained with replay, so only the magnitudes matter):
 * exact from the threshold n >= 1 + (W - 1) * (tail-only decoder layers) of MODEL_V41 §7. */
typedef struct {
    int cfg, tail;
    double lo, hi;  /* bounds of the last prompt token's max|dlogit| / max|logit| */
    int min_agree;  /* greedy tokens that must agree with exact prefill */
} replay_pin_t;

static const replay_pin_t replay_pins[] = {
    {0, 16, 1e-2, 1e-1, 16}, {0, 24, 5e-3, 5e-2, 8}, {0, 32, 5e-4, 1e-2, 32}, {0, 46, 0, 0, 64}, {0, 140, 0, 0, 64},
    {1, 24, 1e-2, 2e-1, 1}, {1, 48, 1e-3, 1e-1, 1}, {1, 96, 0, 1e-2, 8}, {1, 116, 0, 0, 64}, {1, 140, 0, 0, 64},
};

static void test_bounded_replay(void) {
    /* tiny-a: window 16, decoder 4..7, layer 4 on every token (it writes the shared pool), 5..7
     * on the tail: exact from n = 1 + 15 * 3 = 46. tiny-b: window 24, decoder 6..11: n = 116. */
    uint32_t *prompt[2], ex_tok[2][REPLAY_GEN];
    float *ex[2];
    for (int i = 0; i < 2; i++) {
        prompt[i] = random_ids(REPLAY_PROMPT, cfgs[i].vocab, 77 + i);
        ex[i] = xmalloc((size_t)REPLAY_GEN * cfgs[i].vocab * 4);
        greedy(&cfgs[i], prompt[i], -1, ex_tok[i], ex[i]);
    }
    for (size_t i = 0; i < DI_ARRAY_LEN(replay_pins); i++) {
        const replay_pin_t *p = &replay_pins[i];
        replay_t r = replay_vs_exact(&cfgs[p->cfg], prompt[p->cfg], p->tail, ex[p->cfg], ex_tok[p->cfg]);
        printf("  %s replay n=%d: last prompt token max|dlogit|/max|logit| %.2e, greedy agrees for %d/%d tokens, "
               "max rel over them %.2e\n", cfgs[p->cfg].name, p->tail, r.last_rel, r.agree, REPLAY_GEN, r.max_rel);
        CHECKF(r.last_rel >= p->lo && r.last_rel <= p->hi && r.agree >= p->min_agree, "%s n=%d: %.3g, %d agree; pinned [%g, %g], >= %d",
               cfgs[p->cfg].name, p->tail, r.last_rel, r.agree, p->lo, p->hi, p->min_agree);
        if (p->hi == 0) CHECK(r.max_rel == 0);
    }
    for (int i = 0; i < 2; i++) free(prompt[i]), free(ex[i]);
}

static void test_setup(void) { CHECKF(false, "set-up failed: %s", err); }

int main(void) {
    index_json = json_load_file(T_GOLDEN "/index.json", 0, NULL);
    bk = backend_cpu_create(0);
    bool ok = index_json != NULL && mkdtemp(tmp) != NULL;
    if (!ok) snprintf(err, sizeof err, "no " T_GOLDEN "/index.json or no temporary directory");
    for (int i = 0; i < 2 && ok; i++) {
        char dir[128];
        cfgs[i].index = t_golden_config(index_json, cfgs[i].name);
        ok = cfgs[i].index && make_model(&cfgs[i], "fp8", dir, sizeof dir) && model_open(&cfgs[i].m, dir, bk, NULL, err, sizeof err) == 0;
    }
    if (ok) {
        RUN(test_golden_qat_off);
        RUN(test_bf16_variant_same_logits);
        RUN(test_golden_qat_on);
        RUN(test_chunks_and_steps_match_oneshot);
        RUN(test_state_roundtrip);
        RUN(test_state_after_replay);
        RUN(test_state_packed_size);
        RUN(test_state_refusals);
        RUN(test_bad_token_refused);
        RUN(test_bounded_replay);
        for (int i = 0; i < 2; i++) model_close(&cfgs[i].m);
    } else {
        RUN(test_setup);
    }
    bk->destroy(bk);
    t_remove_tree(tmp);
    json_decref(index_json);
    return t_finish();
}
