/* The batched forward (forward_batch, forward_step_batch) gives every sequence exactly the
 * logits it gets alone, bit for bit:
 *  (a) packed prefill: several prompts in one call, chunked differently and in shuffled order,
 *      QAT on and off mixed, against one-shot prefill of each alone;
 *  (b) bounded replay: chunks that straddle the replay start, packed with exact prompts;
 *  (c) decode steps over changing subsets in shuffled order (sequences join and leave),
 *      against single steps;
 *  plus refusals that leave every state unchanged: a bad token id, a state listed twice. */
#include "backend_cpu.h"
#include "forward.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSEQ 7
static const int64_t LENS[NSEQ] = {1, 7, 16, 17, 33, 50, 64}; /* around window 16 and ratio-2 groups */
static char tmp[64] = "/tmp/di-fwdb-XXXXXX", err[512];
static backend_t *bk;
static model_t model;
static int V;

static uint64_t rng_state = 12345;
static uint32_t next_rand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static uint32_t *random_ids(int64_t n) {
    uint32_t *ids = xmalloc((size_t)n * 4 + 4);
    for (int64_t i = 0; i < n; i++) ids[i] = next_rand() % (uint32_t)V;
    return ids;
}

static void shuffle(int *v, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next_rand() % (uint32_t)(i + 1)), t = v[i];
        v[i] = v[j], v[j] = t;
    }
}

/* One-shot prefill alone: every position's logits (replay: from decoder_from on). */
static float *alone(const uint32_t *ids, int64_t n, bool qat, int64_t from, int64_t *rows) {
    float *lg = xmalloc((size_t)n * (size_t)V * 4);
    seqstate_t *st = seqstate_new(&model, qat);
    CHECKF(forward_prefill(st, ids, n, from, FWD_LOGITS_ALL, lg, rows, err, sizeof err) == 0, "%s", err);
    seqstate_free(st);
    return lg;
}

/* Packs the prompts into calls of random chunk sizes, sequences in shuffled order, and
 * compares every logits row with the one-shot runs. Returns rows that differ. */
static int packed_prefill(uint32_t **ids, const float *const *ref, const int64_t *from, seqstate_t **st, bool want_all) {
    int64_t done[NSEQ] = {0};
    int bad = 0, calls = 0;
    for (;;) {
        int order[NSEQ], n = 0;
        for (int i = 0; i < NSEQ; i++)
            if (done[i] < LENS[i]) order[n++] = i;
        if (!n) break;
        shuffle(order, n);
        fwd_seq_t s[NSEQ];
        float *out[NSEQ];
        for (int k = 0; k < n; k++) {
            int i = order[k];
            int64_t len = 1 + next_rand() % 13;
            if (len > LENS[i] - done[i]) len = LENS[i] - done[i];
            out[k] = xmalloc((size_t)len * (size_t)V * 4);
            s[k] = (fwd_seq_t){st[i], ids[i] + done[i], len, from[i], want_all ? FWD_LOGITS_ALL : FWD_LOGITS_LAST, out[k], 0, NULL};
        }
        CHECKF(forward_batch(s, n, err, sizeof err) == 0, "%s", err);
        calls++;
        for (int k = 0; k < n; k++) {
            int i = order[k];
            int64_t end = done[i] + s[k].n, first = end - s[k].n_logits; /* positions of the rows returned */
            int64_t base = from[i] > 0 ? from[i] : 0;                    /* ref row 0 is this position */
            for (int64_t r = 0; r < s[k].n_logits; r++)
                bad += memcmp(out[k] + (size_t)r * V, ref[i] + (size_t)(first + r - base) * V, (size_t)V * 4) != 0;
            if (!want_all && end > base) bad += s[k].n_logits != 1;
            done[i] = end;
            free(out[k]);
        }
    }
    printf("  %d packed calls\n", calls);
    return bad;
}

static void test_packed_prefill(void) {
    uint32_t *ids[NSEQ];
    float *ref[NSEQ];
    seqstate_t *st[NSEQ];
    int64_t from[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        ids[i] = random_ids(LENS[i]);
        from[i] = -1;
        ref[i] = alone(ids[i], LENS[i], i % 2 == 0, -1, NULL);
        st[i] = seqstate_new(&model, i % 2 == 0);
    }
    int bad = packed_prefill(ids, (const float *const *)ref, from, st, true);
    CHECKF(bad == 0, "%d logits rows differ from one-shot prefill", bad);
    for (int i = 0; i < NSEQ; i++) CHECK_EQ(st[i]->T, LENS[i]);
    for (int i = 0; i < NSEQ; i++) seqstate_free(st[i]), free(ids[i]), free(ref[i]);
}

static void test_packed_replay(void) {
    uint32_t *ids[NSEQ];
    float *ref[NSEQ];
    seqstate_t *st[NSEQ];
    int64_t from[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        ids[i] = random_ids(LENS[i]);
        from[i] = i % 3 == 0 ? -1 : LENS[i] - 5 - i; /* tails of 6..11 tokens (or the whole prompt) */
        if (from[i] < -1) from[i] = 0;
        ref[i] = alone(ids[i], LENS[i], true, from[i], NULL);
        st[i] = seqstate_new(&model, true);
    }
    int bad = packed_prefill(ids, (const float *const *)ref, from, st, false);
    CHECKF(bad == 0, "%d last-row logits differ from one-shot replayed prefill", bad);
    /* the states carry on identically: one step each, batched, against a step alone */
    seqstate_t *solo[NSEQ];
    uint32_t next[NSEQ];
    float *lg = xmalloc((size_t)NSEQ * V * 4), *one = xmalloc((size_t)V * 4);
    for (int i = 0; i < NSEQ; i++) {
        solo[i] = seqstate_new(&model, true);
        CHECK(forward_prefill(solo[i], ids[i], LENS[i], from[i], FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
        next[i] = next_rand() % (uint32_t)V;
    }
    CHECK(forward_step_batch(st, next, NSEQ, lg, err, sizeof err) == 0);
    bad = 0;
    for (int i = 0; i < NSEQ; i++) {
        CHECK(forward_step(solo[i], next[i], one, err, sizeof err) == 0);
        bad += memcmp(one, lg + (size_t)i * V, (size_t)V * 4) != 0;
        seqstate_free(solo[i]), seqstate_free(st[i]), free(ids[i]), free(ref[i]);
    }
    CHECKF(bad == 0, "%d sequences step differently after a packed replayed prefill", bad);
    free(lg), free(one);
}

static void test_batched_steps(void) {
    enum { STEPS = 40 };
    uint32_t *prompt[NSEQ], *gen[NSEQ];
    seqstate_t *st[NSEQ], *solo[NSEQ];
    int64_t pos[NSEQ] = {0};
    float *lg = xmalloc((size_t)NSEQ * V * 4), *one = xmalloc((size_t)V * 4);
    for (int i = 0; i < NSEQ; i++) {
        prompt[i] = random_ids(LENS[i]);
        gen[i] = random_ids(STEPS);
        st[i] = seqstate_new(&model, i != 3);
        solo[i] = seqstate_new(&model, i != 3);
        CHECK(forward_prefill(st[i], prompt[i], LENS[i], -1, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
        CHECK(forward_prefill(solo[i], prompt[i], LENS[i], -1, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err) == 0);
    }
    int bad = 0, rows = 0;
    for (int round = 0; round < 3 * STEPS; round++) {
        int order[NSEQ], n = 0;
        for (int i = 0; i < NSEQ; i++) /* each round a random subset of those not finished */
            if (pos[i] < STEPS && next_rand() % 3) order[n++] = i;
        if (!n) continue;
        shuffle(order, n);
        seqstate_t *b[NSEQ];
        uint32_t tok[NSEQ];
        for (int k = 0; k < n; k++) b[k] = st[order[k]], tok[k] = gen[order[k]][pos[order[k]]];
        CHECK(forward_step_batch(b, tok, n, lg, err, sizeof err) == 0);
        for (int k = 0; k < n; k++) {
            int i = order[k];
            CHECK(forward_step(solo[i], tok[k], one, err, sizeof err) == 0);
            bad += memcmp(one, lg + (size_t)k * V, (size_t)V * 4) != 0;
            pos[i]++, rows++;
        }
    }
    printf("  %d batched step rows compared\n", rows);
    CHECKF(bad == 0, "%d of %d batched step rows differ from single steps", bad, rows);
    for (int i = 0; i < NSEQ; i++) seqstate_free(st[i]), seqstate_free(solo[i]), free(prompt[i]), free(gen[i]);
    free(lg), free(one);
}

static void test_refusals(void) {
    seqstate_t *a = seqstate_new(&model, true), *b = seqstate_new(&model, true);
    uint32_t good[3] = {1, 2, 3}, worse[2] = {4, (uint32_t)V};
    fwd_seq_t s[2] = {{a, good, 3, -1, FWD_LOGITS_NONE, NULL, 0, NULL}, {b, worse, 2, -1, FWD_LOGITS_NONE, NULL, 0, NULL}};
    CHECK(forward_batch(s, 2, err, sizeof err) == -1 && strstr(err, "outside the vocabulary"));
    CHECK(a->T == 0 && b->T == 0);
    s[1] = (fwd_seq_t){a, good, 3, -1, FWD_LOGITS_NONE, NULL, 0, NULL};
    CHECK(forward_batch(s, 2, err, sizeof err) == -1 && strstr(err, "twice"));
    CHECK(a->T == 0);
    seqstate_t *both[2] = {a, b};
    CHECK(forward_step_batch(both, good, 2, NULL, err, sizeof err) == 0 && a->T == 1 && b->T == 1);
    seqstate_free(a), seqstate_free(b);
}

static void test_setup(void) { CHECKF(false, "set-up failed: %s", err); }

int main(void) {
    bk = backend_cpu_create(2);
    bool ok = mkdtemp(tmp) != NULL && t_tiny_model(tmp, "a", 512, 7, true, err, sizeof err) == 0 &&
              model_open(&model, tmp, bk, NULL, err, sizeof err) == 0;
    if (ok) {
        V = (int)model.cfg.vocab_size;
        RUN(test_packed_prefill);
        RUN(test_packed_replay);
        RUN(test_batched_steps);
        RUN(test_refusals);
        model_close(&model);
    } else {
        RUN(test_setup);
    }
    bk->destroy(bk);
    t_remove_tree(tmp);
    return t_finish();
}
