#include "sampler.h"
#include "hash64.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double p;
    uint32_t id;
} cand_t;

struct sampler {
    int64_t vocab;
    cand_t *cand;
};

sampler_params_t sampler_params(const frame_params_t *p, const char *id) {
    sampler_params_t s = {
        .temperature = p->temperature >= 0 ? p->temperature : SAMPLER_DEFAULT_TEMPERATURE,
        .top_k = p->top_k > 0 ? p->top_k : 0,
        .top_p = p->top_p >= 0 ? p->top_p : 1.0,
        .min_p = p->min_p >= 0 ? (p->min_p <= 1 ? p->min_p : 1.0) : 0.0, /* frames are not the request's parser */
        .seed = p->has_seed ? p->seed : sampler_seed_of_id(id ? id : ""),
        .logprobs = p->logprobs,
        .top_logprobs = p->logprobs ? (int)(p->top_logprobs < FRAME_MAX_TOP ? p->top_logprobs : FRAME_MAX_TOP) : 0,
    };
    return s;
}

bool sampler_greedy(const sampler_params_t *sp) { return sp->temperature < SAMPLER_MIN_TEMPERATURE || sp->top_k == 1; }

uint64_t sampler_seed_of_id(const char *id) { return hash64(HASH64_INIT, id, strlen(id)); }

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sampler_uniform(uint64_t seed, int64_t position) {
    return (double)(mix64(seed ^ mix64((uint64_t)position)) >> 11) * 0x1p-53;
}

sampler_t *sampler_new(int64_t vocab) {
    sampler_t *s = xcalloc(1, sizeof *s);
    s->vocab = vocab;
    s->cand = xmalloc((size_t)vocab * sizeof *s->cand);
    return s;
}

void sampler_free(sampler_t *s) {
    if (!s) return;
    free(s->cand);
    free(s);
}

/* The order tokens are ranked in: larger first, the lower id on a tie. NaN ranks last. */
static bool before(double a, uint32_t ia, double b, uint32_t ib) {
    if (isnan(b)) return !isnan(a) || ia < ib;
    if (isnan(a)) return false;
    return a > b || (a == b && ia < ib);
}

static int cmp_cand(const void *x, const void *y) {
    const cand_t *a = x, *b = y;
    return before(a->p, a->id, b->p, b->id) ? -1 : before(b->p, b->id, a->p, a->id) ? 1 : 0;
}

/* Rearranges c so that c[0..k) are the k first in rank order (not sorted), k < n. */
static void select_first(cand_t *c, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        cand_t piv = c[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (before(c[i].p, c[i].id, piv.p, piv.id)) i++;
            while (before(piv.p, piv.id, c[j].p, c[j].id)) j--;
            if (i <= j) {
                cand_t t = c[i];
                c[i++] = c[j], c[j--] = t;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return;
    }
}

/* Sorts the first k of c[0..n) in rank order. */
static void sort_first(cand_t *c, int64_t n, int64_t k) {
    if (k < n) select_first(c, n, k);
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

static bool allowed(const uint32_t *mask, int64_t v) { return !mask || (mask[v >> 5] >> (v & 31) & 1); }

static uint32_t argmax(const float *l, int64_t V, const uint32_t *mask) {
    int64_t best = 0;
    while (best < V && !allowed(mask, best)) best++;
    if (best == V) return SAMPLER_NONE;
    for (int64_t v = best + 1; v < V; v++)
        if (allowed(mask, v) && before(l[v], (uint32_t)v, l[best], (uint32_t)best)) best = v;
    return (uint32_t)best;
}

/* c[0..n) = the allowed tokens in id order with z = logit / temperature (NaN: -inf); returns
 * n and the largest z in *mx. A mask is walked a word at a time: sparse ones cost little. */
static int64_t candidates(sampler_t *s, const sampler_params_t *sp, const float *l, const uint32_t *mask, double *mx) {
    int64_t V = s->vocab, n = 0;
    cand_t *c = s->cand;
    double m = -INFINITY;
    for (int64_t w = 0; w * 32 < V; w++) {
        uint32_t bits = mask ? mask[w] : ~0u;
        while (bits) {
            int64_t v = w * 32 + __builtin_ctz(bits);
            bits &= bits - 1;
            if (v >= V) break;
            cand_t x = {isnan(l[v]) ? -INFINITY : (double)l[v] / sp->temperature, (uint32_t)v};
            m = x.p > m ? x.p : m;
            c[n++] = x;
        }
    }
    *mx = m;
    return n;
}

/* log-softmax of the raw logits for the chosen token, and the top alternatives. */
static void logprobs(const float *l, int64_t V, uint32_t chosen, int n_top, frame_logprob_t *lp) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    for (int64_t v = 0; v < V; v++) sum += exp((double)l[v] - mx);
    double lse = mx + log(sum);
    lp->logprob = (float)((double)l[chosen] - lse);
    lp->n_top = 0;
    for (int64_t v = 0; v < V && n_top > 0; v++) { /* insertion into a short ranked list */
        uint32_t n = lp->n_top;
        if (n == (uint32_t)n_top && !before(l[v], (uint32_t)v, l[lp->top_ids[n - 1]], lp->top_ids[n - 1])) continue;
        uint32_t at = n < (uint32_t)n_top ? n : n - 1;
        while (at > 0 && before(l[v], (uint32_t)v, l[lp->top_ids[at - 1]], lp->top_ids[at - 1])) {
            lp->top_ids[at] = lp->top_ids[at - 1];
            at--;
        }
        lp->top_ids[at] = (uint32_t)v;
        if (n < (uint32_t)n_top) lp->n_top++;
    }
    for (uint32_t i = 0; i < lp->n_top; i++) lp->top_logprobs[i] = (float)((double)l[lp->top_ids[i]] - lse);
}

static uint32_t sample(sampler_t *s, const sampler_params_t *sp, const float *l, int64_t position, const uint32_t *mask) {
    cand_t *c = s->cand;
    double mx;
    int64_t n = candidates(s, sp, l, mask, &mx);
    if (!n) return SAMPLER_NONE;
    bool ranked = false, selected = sp->top_k > 0 && sp->top_k < n;
    if (selected) {
        select_first(c, n, sp->top_k);
        n = sp->top_k;
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += c[i].p = exp(c[i].p - mx);
    if (sp->top_p < 1.0) { /* rank a growing prefix until it holds the mass */
        double want = sp->top_p * total, cum = 0;
        int64_t k = n < 256 ? n : 256, keep = 0;
        for (;;) {
            sort_first(c, n, k);
            cum = 0;
            for (keep = 0; keep < k && (keep == 0 || cum < want); keep++) cum += c[keep].p;
            if (cum >= want || k == n) break;
            k = k * 8 < n ? k * 8 : n;
        }
        n = keep;
        total = cum;
        ranked = true;
    }
    if (sp->min_p > 0) { /* the most probable token has p = 1 (exp of 0) */
        int64_t k = 0;
        total = 0;
        for (int64_t i = 0; i < n; i++)
            if (c[i].p >= sp->min_p) total += (c[k++] = c[i]).p;
        if (!k) return c[n - 1].id; /* no finite z (p NaN or 0): the last token, as the walk below ends without min-p */
        n = k;
    }
    if (!ranked && selected) qsort(c, (size_t)n, sizeof *c, cmp_cand); /* selection order is arbitrary */
    double target = sampler_uniform(sp->seed, position) * total, cum = 0;
    for (int64_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (cum > target) return c[i].id;
    }
    return c[n - 1].id;
}

uint32_t sampler_pick(sampler_t *s, const sampler_params_t *sp, const float *logits, int64_t position, const uint32_t *mask,
                      frame_logprob_t *lp) {
    uint32_t id = sampler_greedy(sp) ? argmax(logits, s->vocab, mask) : sample(s, sp, logits, position, mask);
    if (id != SAMPLER_NONE && lp && sp->logprobs) logprobs(logits, s->vocab, id, sp->top_logprobs, lp);
    return id;
}
