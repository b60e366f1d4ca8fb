/* The sampler: the counter-based random stream, greedy ties, temperature / top-k / top-p /
 * min-p against their definitions (frequencies over many positions, and a straightforward
 * full-sort implementation over a large flat vocabulary), log-probabilities, token masks,
 * defaults and the seed of a request without one. */
#include "hash64.h"
#include "sampler.h"
#include "testlib.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sampler_params_t params(double t, int64_t k, double p, double minp, uint64_t seed) {
    return (sampler_params_t){t, k, p, minp, seed, false, 0};
}

static void test_uniform_stream(void) {
    double sum = 0, lo = 1, hi = 0;
    int same = 0;
    enum { N = 200000 };
    for (int64_t i = 0; i < N; i++) {
        double u = sampler_uniform(42, i);
        sum += u, lo = u < lo ? u : lo, hi = u > hi ? u : hi;
        same += u == sampler_uniform(43, i);
    }
    CHECK(lo >= 0 && hi < 1);
    CHECKF(fabs(sum / N - 0.5) < 0.005, "mean %.4f", sum / N);
    CHECK(same < 3);
    CHECK(sampler_uniform(7, 1000) == sampler_uniform(7, 1000)); /* a pure function: no hidden state */
    CHECK(sampler_uniform(7, 1000) != sampler_uniform(7, 1001));
}

static void test_greedy(void) {
    float l[6] = {0.5f, 3.0f, NAN, 3.0f, -1.0f, 2.0f};
    sampler_t *s = sampler_new(6);
    sampler_params_t g = params(0, 0, 1, 0, 1);
    CHECK_EQ(sampler_pick(s, &g, l, 0, NULL, NULL), 1); /* the tie goes to the lower id, NaN never wins */
    sampler_params_t k1 = params(1.0, 1, 1, 0, 1);
    CHECK_EQ(sampler_pick(s, &k1, l, 5, NULL, NULL), 1);
    sampler_params_t tiny = params(1e-320, 0, 1, 0, 1); /* would overflow l / t */
    CHECK_EQ(sampler_pick(s, &tiny, l, 5, NULL, NULL), 1);
    sampler_free(s);
}

/* Frequencies of n draws at positions 0..n-1 against expected probabilities. */
static double worst_freq_error(const sampler_params_t *sp, const float *l, int V, const double *want, int n) {
    sampler_t *s = sampler_new(V);
    int *count = xcalloc((size_t)V, sizeof *count);
    for (int i = 0; i < n; i++) count[sampler_pick(s, sp, l, i, NULL, NULL)]++;
    double worst = 0;
    for (int v = 0; v < V; v++) {
        double e = fabs((double)count[v] / n - want[v]);
        worst = e > worst ? e : worst;
        if (want[v] == 0 && count[v]) worst = 1; /* a filtered token was drawn */
    }
    free(count);
    sampler_free(s);
    return worst;
}

static void softmax(const float *l, int V, double t, const bool *keep, double *p) {
    double z = 0;
    for (int v = 0; v < V; v++) z += keep[v] ? exp(l[v] / t) : 0;
    for (int v = 0; v < V; v++) p[v] = keep[v] ? exp(l[v] / t) / z : 0;
}

static void test_filters_frequencies(void) {
    enum { V = 8, N = 40000 };
    float l[V] = {1.0f, 2.5f, 0.2f, 2.0f, -1.0f, 1.5f, 0.0f, 2.5f};
    double want[V];
    bool all[V], top3[V] = {0}, nucleus[V] = {0}, minp[V] = {0};
    for (int v = 0; v < V; v++) all[v] = true;
    softmax(l, V, 0.7, all, want);
    sampler_params_t sp = params(0.7, 0, 1, 0, 9);
    double e = worst_freq_error(&sp, l, V, want, N);
    CHECKF(e < 0.01, "temperature 0.7: frequencies off by %.4f", e);
    /* top-k 3: ids 1 and 7 (2.5, tie kept both), then 3 (2.0) */
    top3[1] = top3[7] = top3[3] = true;
    softmax(l, V, 1.0, top3, want);
    sp = params(1.0, 3, 1, 0, 10);
    e = worst_freq_error(&sp, l, V, want, N);
    CHECKF(e < 0.01, "top-k 3: off by %.4f", e);
    /* top-p 0.6 at temperature 1: ranked 1, 7, 3, 5, ...; p(1) = p(7) = 0.255.., p(3) = 0.155 */
    softmax(l, V, 1.0, all, want);
    double cum = 0;
    int ranked[V] = {1, 7, 3, 5, 0, 2, 6, 4};
    for (int i = 0; i < V && cum < 0.6; i++) nucleus[ranked[i]] = true, cum += want[ranked[i]];
    CHECK(nucleus[1] && nucleus[7] && nucleus[3] && !nucleus[5]);
    softmax(l, V, 1.0, nucleus, want);
    sp = params(1.0, 0, 0.6, 0, 11);
    e = worst_freq_error(&sp, l, V, want, N);
    CHECKF(e < 0.01, "top-p 0.6: off by %.4f", e);
    /* min-p 0.6: p >= 0.6 times the largest, i.e. logit >= 2.5 + ln 0.6 = 1.989: ids 1, 7 and 3 (0.607) */
    for (int v = 0; v < V; v++) minp[v] = l[v] >= 2.5 + log(0.6);
    CHECK(minp[3] && !minp[5]);
    softmax(l, V, 1.0, minp, want);
    sp = params(1.0, 0, 1, 0.6, 12);
    e = worst_freq_error(&sp, l, V, want, N);
    CHECKF(e < 0.01, "min-p 0.6: off by %.4f", e);
}

/* The definition, written plainly: rank everything, cut the nucleus, walk it. */
typedef struct {
    double p;
    uint32_t id;
} pair_t;
static int by_rank(const void *a, const void *b) {
    const pair_t *x = a, *y = b;
    return x->p > y->p ? -1 : x->p < y->p ? 1 : (x->id > y->id) - (x->id < y->id);
}

static uint32_t naive_top_p(const float *l, int V, double t, double top_p, uint64_t seed, int64_t pos) {
    pair_t *c = xmalloc((size_t)V * sizeof *c);
    double mx = -INFINITY, total = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, (double)l[v] / t);
    for (int v = 0; v < V; v++) total += c[v].p = exp((double)l[v] / t - mx), c[v].id = (uint32_t)v;
    qsort(c, (size_t)V, sizeof *c, by_rank);
    double cum = 0;
    int keep = 0;
    while (keep < V && (keep == 0 || cum < top_p * total)) cum += c[keep++].p;
    double target = sampler_uniform(seed, pos) * cum, run = 0;
    uint32_t id = c[keep - 1].id;
    for (int i = 0; i < keep; i++)
        if ((run += c[i].p) > target) {
            id = c[i].id;
            break;
        }
    free(c);
    return id;
}

static void test_top_p_large_vocab(void) {
    enum { V = 5000 };
    float *l = xmalloc(V * sizeof *l);
    uint64_t x = 99;
    for (int v = 0; v < V; v++) { /* flat-ish logits, some ties: the nucleus spans thousands of tokens */
        x = x * 6364136223846793005ull + 1;
        l[v] = (float)((x >> 40) % 200) / 100.0f;
    }
    sampler_t *s = sampler_new(V);
    int bad = 0;
    double tops[] = {0.05, 0.5, 0.9, 0.999};
    for (size_t k = 0; k < DI_ARRAY_LEN(tops); k++)
        for (int64_t pos = 0; pos < 50; pos++) {
            sampler_params_t sp = params(0.8, 0, tops[k], 0, 5 + k);
            bad += sampler_pick(s, &sp, l, pos, NULL, NULL) != naive_top_p(l, V, 0.8, tops[k], 5 + k, pos);
        }
    CHECKF(bad == 0, "%d of 200 draws differ from the plain definition", bad);
    sampler_free(s);
    free(l);
}

static void test_logprobs(void) {
    float l[5] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
    double lse = 0;
    for (int v = 0; v < 5; v++) lse += exp(l[v]);
    lse = log(lse);
    sampler_t *s = sampler_new(5);
    sampler_params_t sp = params(0, 0, 1, 0, 1);
    sp.logprobs = true, sp.top_logprobs = 3;
    frame_logprob_t lp;
    uint32_t id = sampler_pick(s, &sp, l, 0, NULL, &lp);
    CHECK_EQ(id, 1);
    CHECK(fabs(lp.logprob - (3.0 - lse)) < 1e-6);
    CHECK_EQ(lp.n_top, 3);
    CHECK(lp.top_ids[0] == 1 && lp.top_ids[1] == 2 && lp.top_ids[2] == 0);
    CHECK(fabs(lp.top_logprobs[2] - (1.0 - lse)) < 1e-6);
    sp.top_logprobs = 0;
    sampler_pick(s, &sp, l, 0, NULL, &lp);
    CHECK_EQ(lp.n_top, 0);
    sampler_free(s);
}

/* A token mask: only its tokens are drawn, and every filter acts on them alone (as if the
 * others were not in the vocabulary); greedy takes the largest allowed logit; logprobs stay the
 * model's; an empty mask gives SAMPLER_NONE. */
static void test_mask(void) {
    enum { V = 40, N = 40000 };
    float l[V];
    for (int v = 0; v < V; v++) l[v] = (float)((v * 7) % 11) / 4.0f; /* largest (2.5) at ids 3, 14, 25, 36 */
    uint32_t mask[2] = {0};
    bool keep[V] = {0};
    int allowed[] = {0, 5, 12, 31, 33, 38, 39}; /* none of the largest */
    for (size_t i = 0; i < DI_ARRAY_LEN(allowed); i++) mask[allowed[i] / 32] |= 1u << (allowed[i] % 32), keep[allowed[i]] = true;
    sampler_t *s = sampler_new(V);
    sampler_params_t sp = params(0, 0, 1, 0, 1);
    int best = 0;
    for (int v = 0; v < V; v++)
        if (keep[v] && (!keep[best] || l[v] > l[best])) best = v;
    CHECK_EQ(sampler_pick(s, &sp, l, 0, mask, NULL), (uint32_t)best);
    double want[V];
    softmax(l, V, 0.8, keep, want);
    int *count = xcalloc(V, sizeof *count), bad = 0;
    sp = params(0.8, 0, 1, 0, 5);
    for (int i = 0; i < N; i++) count[sampler_pick(s, &sp, l, i, mask, NULL)]++;
    double worst = 0;
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs((double)count[v] / N - want[v])), bad += !keep[v] && count[v];
    CHECKF(worst < 0.01 && !bad, "masked frequencies off by %.4f, %d outside the mask", worst, bad);
    /* top-k 2 keeps the two largest allowed logits, not the vocabulary's */
    bool top2[V] = {0};
    int first = best, second = -1;
    for (int v = 0; v < V; v++)
        if (keep[v] && v != first && (second < 0 || l[v] > l[second])) second = v;
    top2[first] = top2[second] = true;
    softmax(l, V, 1.0, top2, want);
    memset(count, 0, V * sizeof *count);
    sp = params(1.0, 2, 1, 0, 6);
    for (int i = 0; i < N; i++) count[sampler_pick(s, &sp, l, i, mask, NULL)]++;
    worst = 0;
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs((double)count[v] / N - want[v]));
    CHECKF(worst < 0.01, "masked top-k 2 off by %.4f", worst);
    sp = params(1.0, 0, 1, 0, 7);
    sp.logprobs = true, sp.top_logprobs = 1;
    frame_logprob_t lp;
    uint32_t id = sampler_pick(s, &sp, l, 3, mask, &lp);
    double lse = 0;
    for (int v = 0; v < V; v++) lse += exp(l[v]);
    CHECK(keep[id] && fabs(lp.logprob - (l[id] - log(lse))) < 1e-5 && !keep[lp.top_ids[0]]); /* the raw distribution */
    uint32_t none[2] = {0};
    CHECK_EQ(sampler_pick(s, &sp, l, 3, none, NULL), SAMPLER_NONE);
    sp.temperature = 0;
    CHECK_EQ(sampler_pick(s, &sp, l, 3, none, NULL), SAMPLER_NONE);
    free(count);
    sampler_free(s);
}

static void test_params(void) {
    frame_params_t p;
    frame_params_init(&p);
    sampler_params_t sp = sampler_params(&p, "req-7");
    CHECK(sp.temperature == SAMPLER_DEFAULT_TEMPERATURE && sp.top_k == 0 && sp.top_p == 1 && sp.min_p == 0);
    CHECK(sp.seed == hash64(HASH64_INIT, "req-7", 5) && sp.seed == sampler_seed_of_id("req-7"));
    CHECK(sampler_params(&p, "req-8").seed != sp.seed);
    p.has_seed = true, p.seed = 0, p.temperature = 0, p.top_logprobs = 99, p.logprobs = true;
    sp = sampler_params(&p, "req-7");
    CHECK(sp.seed == 0 && sp.temperature == 0 && sp.top_logprobs == FRAME_MAX_TOP);
    p.min_p = 7; /* a frame's min-p above 1 keeps the top token, as 1 does */
    CHECK(sampler_params(&p, "req-7").min_p == 1.0);
}

/* min-p with no finite z (every allowed logit -inf or NaN, or a +inf one: p is NaN or 0, none
 * kept): the last allowed token, as the walk without min-p ends (it read before the list). */
static void test_min_p_without_finite_z(void) {
    enum { V = 6 };
    sampler_t *s = sampler_new(V);
    sampler_params_t sp = {.temperature = 1.0, .top_p = 1.0, .min_p = 0.3, .seed = 5};
    float none[V] = {-INFINITY, NAN, -INFINITY, NAN, -INFINITY, -INFINITY}, inf[V] = {0.5f, INFINITY, 1.0f, 2.0f, 0.0f, -1.0f};
    uint32_t mask = 0x0Fu; /* ids 0-3 */
    CHECK_EQ(sampler_pick(s, &sp, none, 3, NULL, NULL), V - 1);
    CHECK_EQ(sampler_pick(s, &sp, none, 3, &mask, NULL), 3);
    CHECK_EQ(sampler_pick(s, &sp, inf, 3, NULL, NULL), V - 1);
    CHECK_EQ(sampler_pick(s, &sp, inf, 3, &mask, NULL), 3);
    sp.min_p = 0;
    CHECK_EQ(sampler_pick(s, &sp, none, 3, NULL, NULL), V - 1);
    sampler_free(s);
}

int main(void) {
    RUN(test_uniform_stream);
    RUN(test_greedy);
    RUN(test_filters_frequencies);
    RUN(test_top_p_large_vocab);
    RUN(test_logprobs);
    RUN(test_mask);
    RUN(test_params);
    RUN(test_min_p_without_finite_z);
    return t_finish();
}
