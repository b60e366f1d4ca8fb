/* The prefill and decode engines driven directly (no transport): every frame they emit goes
 * through frame_encode / frame_decode on its way to the test.
 *  - the state frame round-trips byte-exactly, and so do its state bytes; the state equals a
 *    direct prefill of the prompt alone (exact and bounded replay) though the engine chunked it;
 *  - outputs do not depend on batching: decode max-batch 64 vs 1, prefill budget 512 vs 3,
 *    requests submitted in reverse, greedy and seeded sampling with filters;
 *  - refusals answer the request and the engine keeps serving: another model's state, a
 *    truncated or corrupted state, a frame whose token disagrees with its state, bad prompts,
 *    constrained requests where no vocabulary is loaded;
 *  - the context rule: a prompt must be shorter than the context; output stops with "length"
 *    when prompt + output reach it;
 *  - memory pressure: a pool smaller than the load queues, everything is answered, the pool
 *    bound holds; a sequence larger than the whole pool is refused;
 *  - stop conditions (end-of-sentence, stop token ids, max_tokens), meta on the first frame,
 *    usage, logprobs;
 *  - constrained requests (regexes on a synthetic vocabulary): outputs keep to their grammar,
 *    do not depend on batching or logprobs, stop ids end them only where complete; refusals. */
#include "backend_cpu.h"
#include "decode_engine.h"
#include "forward.h"
#include "grammar.h"
#include "prefill_engine.h"
#include "sampler.h"
#include "seqstate_io.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmp[64] = "/tmp/di-eng-XXXXXX", err[512];
static backend_t *bk;
static model_t model_a, model_b;

/* ---- frames the engines emit, re-read from their wire form ---- */
typedef struct {
    frame_t *v;
    buf_t *wire;
    size_t n;
} frames_t;

static void collect(void *ctx, frame_t *f) {
    frames_t *c = ctx;
    c->v = xrealloc(c->v, (c->n + 1) * sizeof *c->v);
    c->wire = xrealloc(c->wire, (c->n + 1) * sizeof *c->wire);
    buf_t b = {0};
    frame_encode(f, &b);
    uint64_t seq;
    char e[256];
    CHECKF(frame_decode(b.data, b.len, &c->v[c->n], NULL, &seq, e, sizeof e) == 0, "emitted frame does not decode: %s", e);
    c->wire[c->n++] = b;
}

static void frames_free(frames_t *c) {
    for (size_t i = 0; i < c->n; i++) frame_free(&c->v[i]), buf_free(&c->wire[i]);
    free(c->v), free(c->wire);
    *c = (frames_t){0};
}

static frame_t request(const char *id, uint64_t seq, int64_t len, uint32_t salt, int64_t max_tokens) {
    frame_t f;
    frame_init(&f, FRAME_REQUEST);
    f.id = xstrdup(id);
    f.seq = seq;
    f.n_tokens = (uint32_t)len;
    f.tokens = xmalloc((size_t)len * 4 + 4);
    for (int64_t i = 0; i < len; i++) f.tokens[i] = (uint32_t)((i * 37 + salt * 101 + 11) % 512);
    f.params.max_tokens = max_tokens;
    f.params.temperature = 0;
    f.has_meta = true;
    frame_add_hop(&f, "test", 1, 2);
    return f;
}

static prefill_opts_t prefill_opts(const model_t *m, int64_t budget, int64_t context, frames_t *out) {
    return (prefill_opts_t){m, true, -1, budget, context, "di-prefill", collect, out, NULL};
}

static decode_opts_t decode_opts(int64_t batch, int64_t pool, int64_t context, frames_t *out) {
    return (decode_opts_t){&model_a, batch, pool, {-1, 16, context}, NULL, "di-decode", collect, out, NULL};
}

/* Prefills the requests (moved) in the order given. */
static void run_prefill(const prefill_opts_t *o, frame_t *reqs, int n) {
    prefill_engine_t *p = prefill_new(o);
    for (int i = 0; i < n; i++) prefill_submit(p, &reqs[i], 100);
    while (prefill_step(p)) {}
    CHECK_EQ(prefill_pending_tokens(p), 0);
    prefill_free(p);
}

/* Decodes copies of the state frames (in the order of `order`, or as given); the engine takes
 * new states between steps as a transport would. Returns the engine's stats. */
static decode_stats_t run_decode(const decode_opts_t *o, const frames_t *states, const int *order) {
    decode_engine_t *d = decode_new(o);
    for (size_t i = 0; i < states->n; i++) {
        size_t k = order ? (size_t)order[i] : i;
        frame_t f;
        uint64_t seq;
        CHECK(frame_decode(states->wire[k].data, states->wire[k].len, &f, NULL, &seq, err, sizeof err) == 0);
        if (f.type == FRAME_STATE) decode_submit(d, &f, 200);
        frame_free(&f);
        if (i % 3 == 2) decode_step(d); /* sequences join a running batch */
    }
    while (decode_step(d)) {}
    CHECK(decode_running(d) == 0 && decode_waiting(d) == 0);
    decode_stats_t s = *decode_stats(d);
    decode_free(d);
    return s;
}

/* Per request id: "tokens... | reason" or "error:code", and the count of terminal frames. */
typedef struct {
    char id[32];
    buf_t text;
    int terminal;
} answer_t;

static answer_t *answers(const frames_t *out, int *n_out) {
    answer_t *a = xcalloc(out->n + 1, sizeof *a);
    int n = 0;
    for (size_t i = 0; i < out->n; i++) {
        const frame_t *f = &out->v[i];
        int k = 0;
        while (k < n && strcmp(a[k].id, f->id)) k++;
        if (k == n) snprintf(a[n++].id, sizeof a->id, "%s", f->id);
        if (f->type == FRAME_TOKENS)
            for (uint32_t t = 0; t < f->n_tokens; t++) buf_printf(&a[k].text, "%u ", f->tokens[t]);
        if (f->type == FRAME_DONE) buf_printf(&a[k].text, "| %s", f->finish_reason);
        if (f->type == FRAME_ERROR) buf_printf(&a[k].text, "error:%s", f->code);
        a[k].terminal += f->type == FRAME_DONE || f->type == FRAME_ERROR;
    }
    *n_out = n;
    return a;
}

static const char *answer_of(answer_t *a, int n, const char *id) {
    for (int k = 0; k < n; k++)
        if (!strcmp(a[k].id, id)) return a[k].text.len ? buf_cstr(&a[k].text) : "";
    return "(none)";
}

static void answers_free(answer_t *a, int n) {
    for (int k = 0; k < n; k++) buf_free(&a[k].text);
    free(a);
}

/* ---- tests ---- */

static void test_state_frame_roundtrip(void) {
    frames_t st = {0};
    frame_t r = request("r", 3, 37, 1, 9);
    r.params.logprobs = true, r.params.top_logprobs = 2;
    r.meta.shape = SHAPE_CHAT;
    prefill_opts_t po = prefill_opts(&model_a, 512, 4096, &st);
    run_prefill(&po, &r, 1);
    CHECK_EQ(st.n, 1);
    if (st.n != 1) return;
    frame_t *s = &st.v[0];
    CHECK(s->type == FRAME_STATE && !strcmp(s->id, "r") && s->seq == 3 && s->n_tokens == 1);
    CHECK(s->params.max_tokens == 9 && s->meta.shape == SHAPE_CHAT && s->meta.prompt_tokens == 37);
    CHECK(s->logprobs && s->logprobs[0].n_top == 2);
    CHECK(s->n_hops == 2 && !strcmp(s->hops[1].stage, "di-prefill") && s->hops[1].in_us == 100);
    buf_t again = {0};
    frame_encode(s, &again); /* decode -> encode gives the same bytes */
    CHECK(again.len == st.wire[0].len && !memcmp(again.data, st.wire[0].data, again.len));
    seqstate_t *state = seqstate_deserialize(&model_a, s->state, s->state_len, err, sizeof err);
    CHECKF(state, "%s", err);
    if (state) {
        buf_t bytes = {0};
        seqstate_serialize(state, &bytes);
        CHECK(bytes.len == s->state_len && !memcmp(bytes.data, s->state, bytes.len));
        CHECK(state->T == 37 && state->next_token == s->tokens[0] && state->rng[0] == sampler_seed_of_id("r"));
        printf("  state frame %zu bytes for 37 prompt tokens (state %llu bytes)\n", again.len, (unsigned long long)s->state_len);
        buf_free(&bytes);
        seqstate_free(state);
    }
    buf_free(&again);
    frames_free(&st);
}

/* The engine's state equals a direct prefill of the prompt alone (exact, and bounded replay),
 * byte for byte, though the engine cut the prompt into budget-sized chunks packed with others. */
static void test_prefill_state_equals_direct(void) {
    for (int replay = -1; replay <= 8; replay += 9) {
        frames_t st = {0};
        frame_t reqs[3] = {request("x", 0, 9, 7, 4), request("p", 1, 30, 3, 4), request("y", 2, 5, 8, 4)};
        uint32_t ids[30];
        memcpy(ids, reqs[1].tokens, sizeof ids);
        prefill_opts_t po = prefill_opts(&model_a, 7, 4096, &st);
        po.replay = replay;
        run_prefill(&po, reqs, 3);
        const frame_t *got = NULL;
        for (size_t i = 0; i < st.n; i++)
            if (!strcmp(st.v[i].id, "p")) got = &st.v[i];
        float *logits = xmalloc(512 * sizeof(float));
        seqstate_t *direct = seqstate_new(&model_a, true);
        CHECK(forward_prompt(direct, ids, 30, replay, 0, FWD_LOGITS_LAST, logits, NULL, err, sizeof err) == 0);
        frame_params_t fp;
        frame_params_init(&fp);
        fp.temperature = 0;
        sampler_params_t sp = sampler_params(&fp, "p");
        sampler_t *smp = sampler_new(512);
        direct->next_token = sampler_pick(smp, &sp, logits, direct->T, NULL, NULL);
        direct->rng[0] = sp.seed;
        buf_t bytes = {0};
        seqstate_serialize(direct, &bytes);
        CHECKF(got && got->state_len == bytes.len && !memcmp(got->state, bytes.data, bytes.len),
               "replay %d: the engine's state differs from a direct prefill", replay);
        buf_free(&bytes);
        sampler_free(smp);
        seqstate_free(direct);
        free(logits);
        frames_free(&st);
    }
}

#define NREQ 12
static frame_t mixed_request(int i) {
    static const int64_t lens[NREQ] = {1, 2, 15, 16, 17, 31, 32, 33, 5, 47, 8, 64};
    char id[16];
    snprintf(id, sizeof id, "q%d", i);
    frame_t f = request(id, (uint64_t)i, lens[i], (uint32_t)i, 3 + (i * 7) % 20);
    if (i % 2) { /* seeded sampling, with a different filter on each */
        f.params.temperature = 0.9;
        f.params.has_seed = i % 4 == 1;
        f.params.seed = (uint64_t)i * 1000;
        if (i % 3 == 0) f.params.top_k = 40;
        if (i % 3 == 1) f.params.top_p = 0.8;
        if (i % 3 == 2) f.params.min_p = 0.05;
    }
    return f;
}

/* All requests through both engines; returns the answers. */
static answer_t *generate(int64_t budget, int64_t batch, int64_t pool, bool reverse, int *n, decode_stats_t *ds) {
    frame_t reqs[NREQ];
    for (int i = 0; i < NREQ; i++) reqs[i] = mixed_request(reverse ? NREQ - 1 - i : i);
    frames_t st = {0}, out = {0};
    prefill_opts_t po = prefill_opts(&model_a, budget, 4096, &st);
    run_prefill(&po, reqs, NREQ);
    decode_opts_t dopt = decode_opts(batch, pool, 4096, &out);
    int order[NREQ];
    for (int i = 0; i < NREQ; i++) order[i] = reverse ? NREQ - 1 - i : i;
    decode_stats_t s = run_decode(&dopt, &st, st.n == NREQ ? order : NULL);
    if (ds) *ds = s;
    answer_t *a = answers(&out, n);
    frames_free(&st), frames_free(&out);
    return a;
}

static void test_batching_changes_nothing(void) {
    int na, nb, nc;
    decode_stats_t sa, sb;
    answer_t *a = generate(512, 64, 1 << 20, false, &na, &sa);
    answer_t *b = generate(3, 1, 1 << 20, true, &nb, &sb);
    answer_t *c = generate(40, 5, 1 << 20, true, &nc, NULL);
    CHECK(na == NREQ && nb == NREQ && nc == NREQ);
    int same = 0;
    for (int i = 0; i < na; i++) {
        const char *x = buf_cstr(&a[i].text);
        same += !strcmp(x, answer_of(b, nb, a[i].id)) && !strcmp(x, answer_of(c, nc, a[i].id)) && a[i].terminal == 1;
        if (i < 3) printf("  %s: %s\n", a[i].id, x);
    }
    printf("  %d of %d requests identical alone (batch 1, budget 3, reversed) and batched (64, 512); mean batch %.1f vs %.1f\n",
           same, NREQ, (double)sa.batch_sum / (double)sa.steps, (double)sb.batch_sum / (double)sb.steps);
    CHECK_EQ(same, NREQ);
    CHECK(sb.peak_batch == 1 && sa.peak_batch > 4);
    answers_free(a, na), answers_free(b, nb), answers_free(c, nc);
}

static void test_refusals_keep_serving(void) {
    frames_t sa = {0}, sb = {0}, out = {0};
    frame_t reqs[6];
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        reqs[i] = request(id, (uint64_t)i, 20 + i, (uint32_t)i, 4);
    }
    prefill_opts_t po = prefill_opts(&model_a, 512, 4096, &sa);
    run_prefill(&po, reqs, 5);
    po = prefill_opts(&model_b, 512, 4096, &sb);
    run_prefill(&po, reqs + 5, 1); /* s5: made by the seed-2 model */
    CHECK(sa.n == 5 && sb.n == 1);
    if (sa.n != 5 || sb.n != 1) return;
    /* s1 truncated, s2 corrupted in the middle, s3 with another first token in its frame */
    frame_t *f1 = &sa.v[1], *f2 = &sa.v[2], *f3 = &sa.v[3];
    f1->state_len /= 2;
    f2->state[f2->state_len / 2] ^= 0x40;
    f3->tokens[0] = (f3->tokens[0] + 1) % 512;
    sa.v[4].constraint.kind = CONSTRAINT_JSON_OBJECT; /* s4: a constraint this engine does not apply */
    frames_t mixed = {0};
    const frame_t *order[] = {&sb.v[0], &sa.v[0], f1, f2, f3, &sa.v[4]};
    for (size_t i = 0; i < DI_ARRAY_LEN(order); i++) collect(&mixed, (frame_t *)order[i]);
    decode_opts_t dopt = decode_opts(64, 1 << 20, 4096, &out);
    decode_stats_t ds = run_decode(&dopt, &mixed, NULL);
    int n;
    answer_t *a = answers(&out, &n);
    const char *s5 = answer_of(a, n, "s5"), *s1 = answer_of(a, n, "s1"), *s2 = answer_of(a, n, "s2");
    const char *s3 = answer_of(a, n, "s3"), *s0 = answer_of(a, n, "s0"), *s4 = answer_of(a, n, "s4");
    CHECKF(!strcmp(s5, "error:bad_state") && !strcmp(s1, "error:bad_state") && !strcmp(s2, "error:bad_state") &&
               !strcmp(s3, "error:bad_state"),
           "s5 '%s' s1 '%s' s2 '%s' s3 '%s'", s5, s1, s2, s3);
    CHECKF(strstr(s0, "| length") && !strcmp(s4, "error:unsupported"), "s0 '%s' s4 '%s'", s0, s4);
    CHECK_EQ(ds.errors, 5);
    for (size_t i = 0; i < out.n; i++) /* the reasons name what was wrong */
        if (out.v[i].type == FRAME_ERROR) {
            const char *id = out.v[i].id, *m = out.v[i].message;
            bool named = !strcmp(id, "s5")   ? strstr(m, "another model") != NULL
                         : !strcmp(id, "s1") ? strstr(m, "truncated") != NULL
                         : !strcmp(id, "s3") ? strstr(m, "first token") != NULL
                         : !strcmp(id, "s4") ? strstr(m, "applies no constraints") != NULL
                                             : strstr(m, "state") != NULL;
            CHECKF(named, "%s: %s", id, m);
            if (!strcmp(id, "s5") || !strcmp(id, "s2")) printf("  %s: %s\n", id, m);
        }
    answers_free(a, n);
    frames_free(&sa), frames_free(&sb), frames_free(&out), frames_free(&mixed);
    frame_free(&reqs[5]);
    /* prefill: an id outside the vocabulary and an empty prompt are answered, the next served */
    frames_t pout = {0};
    frame_t bad[4] = {request("v", 0, 4, 1, 2), request("e", 1, 1, 1, 2), request("c", 2, 3, 1, 2), request("ok", 3, 3, 1, 2)};
    bad[0].tokens[2] = 512;
    bad[1].n_tokens = 0;
    bad[2].constraint.kind = CONSTRAINT_JSON_OBJECT; /* never answered unconstrained */
    po = prefill_opts(&model_a, 512, 4096, &pout);
    run_prefill(&po, bad, 4);
    CHECK(pout.n == 4 && pout.v[0].type == FRAME_ERROR && !strcmp(pout.v[0].code, "bad_request") &&
          strstr(pout.v[0].message, "vocabulary") && pout.v[1].type == FRAME_ERROR && strstr(pout.v[1].message, "empty") &&
          pout.v[2].type == FRAME_ERROR && !strcmp(pout.v[2].code, "unsupported") && pout.v[3].type == FRAME_STATE);
    frames_free(&pout);
}

static void test_context_rule(void) {
    frames_t st = {0}, out = {0};
    frame_t reqs[3] = {request("full", 0, 20, 1, 5), request("one", 1, 19, 2, 5), request("ten", 2, 10, 3, 50)};
    prefill_opts_t po = prefill_opts(&model_a, 512, 20, &st);
    run_prefill(&po, reqs, 3);
    CHECK(st.n == 3 && st.v[0].type == FRAME_ERROR && !strcmp(st.v[0].code, "context_length"));
    if (st.n == 3) printf("  %s\n", st.v[0].message);
    decode_opts_t dopt = decode_opts(64, 1 << 20, 20, &out);
    run_decode(&dopt, &st, NULL);
    for (size_t i = 0; i < out.n; i++)
        if (out.v[i].type == FRAME_DONE) {
            const frame_t *d = &out.v[i];
            CHECKF(!strcmp(d->finish_reason, "length") && d->prompt_tokens + d->completion_tokens == 20,
                   "%s: %s after %llu + %llu tokens", d->id, d->finish_reason, (unsigned long long)d->prompt_tokens,
                   (unsigned long long)d->completion_tokens);
        }
    int n;
    answer_t *a = answers(&out, &n);
    CHECK(n == 2 && a[0].terminal == 1 && a[1].terminal == 1);
    answers_free(a, n);
    frames_free(&st), frames_free(&out);
}

static void test_pool_pressure(void) {
    enum { N = 8 };
    frame_t reqs[N + 1];
    for (int i = 0; i <= N; i++) {
        char id[16];
        snprintf(id, sizeof id, "p%d", i);
        reqs[i] = request(id, (uint64_t)i, i == N ? 50 : 10, (uint32_t)i, 15); /* 25 positions each; the last 65 */
    }
    frames_t st = {0}, small = {0}, big = {0};
    prefill_opts_t po = prefill_opts(&model_a, 512, 4096, &st);
    run_prefill(&po, reqs, N + 1);
    decode_opts_t dopt = decode_opts(64, 60, 4096, &small);
    decode_stats_t ds = run_decode(&dopt, &st, NULL);
    dopt = decode_opts(64, 1 << 20, 4096, &big);
    run_decode(&dopt, &st, NULL);
    int ns, nb;
    answer_t *s = answers(&small, &ns), *b = answers(&big, &nb);
    int same = 0;
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "p%d", i);
        same += strstr(answer_of(s, ns, id), "| length") && !strcmp(answer_of(s, ns, id), answer_of(b, nb, id));
    }
    printf("  pool 60 tokens: %d of %d answered as with a large pool; peak pool %llu, peak batch %llu; p%d: %s\n", same, N,
           (unsigned long long)ds.peak_pool, (unsigned long long)ds.peak_batch, N, answer_of(s, ns, "p8"));
    CHECK_EQ(same, N);
    CHECK(ds.peak_pool <= 60 && ds.peak_batch == 2);
    CHECK(!strcmp(answer_of(s, ns, "p8"), "error:too_large"));
    answers_free(s, ns), answers_free(b, nb);
    frames_free(&st), frames_free(&small), frames_free(&big);
}

static void test_stops_meta_usage(void) {
    frames_t st = {0}, out = {0};
    frame_t reqs[1] = {request("g", 0, 12, 5, 12)};
    reqs[0].params.logprobs = true, reqs[0].params.top_logprobs = 3;
    prefill_opts_t po = prefill_opts(&model_a, 512, 4096, &st);
    run_prefill(&po, reqs, 1);
    decode_opts_t dopt = decode_opts(64, 1 << 20, 4096, &out);
    run_decode(&dopt, &st, NULL);
    uint32_t toks[16];
    int nt = 0, with_meta = 0, with_lp = 0;
    for (size_t i = 0; i < out.n; i++) {
        const frame_t *f = &out.v[i];
        if (f->type == FRAME_TOKENS) {
            with_meta += f->has_meta, with_lp += f->logprobs && f->logprobs[0].n_top == 3;
            CHECK(i == 0 ? f->has_meta : !f->has_meta);
            for (uint32_t k = 0; k < f->n_tokens && nt < 16; k++) toks[nt++] = f->tokens[k];
        }
        if (f->type == FRAME_DONE) CHECK(f->prompt_tokens == 12 && f->completion_tokens == 12 && !strcmp(f->finish_reason, "length"));
        CHECK(f->n_hops == 3 && !strcmp(f->hops[2].stage, "di-decode") && f->hops[2].in_us == 200);
    }
    CHECK(nt == 12 && with_meta == 1 && with_lp == 12);
    frames_free(&out);
    if (nt < 12) {
        frames_free(&st);
        return;
    }
    /* the same request ended by the end-of-sentence token (set to its 3rd token) or a stop id (its 5th) */
    dopt = decode_opts(64, 1 << 20, 4096, &out);
    dopt.limits.eos = toks[2];
    run_decode(&dopt, &st, NULL);
    const frame_t *last = &out.v[out.n - 1];
    int first_at = 0;
    while (toks[first_at] != toks[2]) first_at++; /* the first occurrence ends it */
    CHECK(last->type == FRAME_DONE && !strcmp(last->finish_reason, "stop") && last->completion_tokens == (uint64_t)first_at + 1);
    frames_free(&out);
    frame_t *s = &st.v[0];
    s->params.n_stop_ids = 1;
    s->params.stop_ids = xmalloc(4);
    s->params.stop_ids[0] = toks[4];
    buf_free(&st.wire[0]);
    frame_encode(s, &st.wire[0]);
    dopt = decode_opts(64, 1 << 20, 4096, &out);
    run_decode(&dopt, &st, NULL);
    last = &out.v[out.n - 1];
    first_at = 0;
    while (toks[first_at] != toks[4]) first_at++;
    CHECK(last->type == FRAME_DONE && !strcmp(last->finish_reason, "stop") && last->completion_tokens == (uint64_t)first_at + 1);
    frames_free(&out);
    /* max_tokens 1: the first token is the whole output; no decode step runs */
    s->params.max_tokens = 1;
    buf_free(&st.wire[0]);
    frame_encode(s, &st.wire[0]);
    dopt = decode_opts(64, 1 << 20, 4096, &out);
    decode_stats_t ds = run_decode(&dopt, &st, NULL);
    CHECK(out.n == 2 && out.v[1].type == FRAME_DONE && out.v[1].completion_tokens == 1 && ds.steps == 0);
    frames_free(&out), frames_free(&st);
}

/* ---- constrained requests, on a synthetic vocabulary of the 512 ids: 3..255 single bytes, 256..355
 * the two-digit strings "00".."99", the rest "a".."z" pairs; 1 EOS, 2 </think> ---- */
enum { EOS = 1, THINK_END = 2 };

static grammar_vocab_t *vocab_512(void) {
    uint8_t text[512][8];
    const uint8_t *bytes[512];
    uint32_t lens[512];
    bool excluded[512] = {[0] = true, [EOS] = true, [THINK_END] = true};
    for (int i = 0; i < 512; i++) {
        lens[i] = (uint32_t)(i < 256 ? 1 : 2);
        text[i][0] = (uint8_t)(i < 256 ? i : i < 356 ? '0' + (i - 256) / 10 : 'a' + (i - 356) / 26);
        text[i][1] = (uint8_t)(i < 356 ? '0' + (i - 256) % 10 : 'a' + (i - 356) % 26);
        bytes[i] = text[i];
    }
    memcpy(text[EOS], "</s>", 4), lens[EOS] = 4;
    memcpy(text[THINK_END], "</think>", 8), lens[THINK_END] = 8;
    uint32_t eos = EOS;
    return grammar_vocab_new(512, bytes, lens, excluded, &eos, 1, THINK_END);
}

static frame_t constrained(const char *id, uint64_t seq, uint32_t salt, const char *regex, uint64_t seed) {
    frame_t f = request(id, seq, 5 + salt % 7, salt, 24);
    f.params.temperature = 1, f.params.has_seed = true, f.params.seed = seed;
    f.constraint.kind = CONSTRAINT_REGEX;
    f.constraint.text = xstrdup(regex);
    return f;
}

/* Per request id: its output tokens and its terminal frame ("error:code" for an error). */
typedef struct {
    ids_t tokens;
    char end[48];
} out_t;

static void outputs(const frames_t *f, char ids[][16], int n, out_t *o) {
    memset(o, 0, (size_t)n * sizeof *o);
    for (size_t i = 0; i < f->n; i++)
        for (int k = 0; k < n; k++) {
            const frame_t *x = &f->v[i];
            if (strcmp(x->id, ids[k])) continue;
            for (uint32_t t = 0; x->type == FRAME_TOKENS && t < x->n_tokens; t++) ids_push(&o[k].tokens, x->tokens[t]);
            if (x->type == FRAME_DONE) snprintf(o[k].end, sizeof o[k].end, "%s", x->finish_reason);
            if (x->type == FRAME_ERROR) snprintf(o[k].end, sizeof o[k].end, "error:%s", x->code);
        }
}

static bool same_output(const out_t *a, const out_t *b) {
    return !strcmp(a->end, b->end) && a->tokens.n == b->tokens.n &&
           !memcmp(a->tokens.v, b->tokens.v, a->tokens.n * sizeof *a->tokens.v);
}

/* Whether the output keeps to g: every token allowed in turn, complete when it stopped. */
static bool keeps_to(grammar_t *g, const out_t *o) {
    grammar_matcher_t *m = grammar_matcher_new(g, false);
    bool ok = true;
    for (size_t i = 0; i < o->tokens.n && ok; i++) ok = grammar_matcher_accept(m, o->tokens.v[i]);
    ok = ok && (!strcmp(o->end, "stop") ? grammar_matcher_is_accepting(m) : !strcmp(o->end, "length") && o->tokens.n == 24);
    grammar_matcher_free(m);
    return ok;
}

/* Constrained requests through both engines: outputs keep to their grammar (EOS only where
 * complete, "length" inside a structure), do not depend on batching or on logprobs (with them
 * EOS is drawn from a step; without, taken at once where nothing else may follow), stop ids
 * act only where the output is complete; a hash from elsewhere, a first token that breaks the
 * constraint, and no vocabulary are refused. */
static void test_constrained(void) {
    static const char *regex[] = {"[1-9][0-9]{0,4}", "(ab|cd)+x", "[0-9]{3}-[a-z]{2,}", "(0|1)*", "[0-9]-[0-9]"};
    enum { N = 32, STOPS = 20 }; /* c20..c30: "[0-9]-[0-9]" with every digit a stop token id; c31: c0 with logprobs */
    grammar_vocab_t *v = vocab_512();
    grammar_t *g[5];
    for (int r = 0; r < 5; r++) g[r] = grammar_compile(v, CONSTRAINT_REGEX, regex[r], true, err, sizeof err);
    constraints_opts_t co = {.vocab = v, .vocab_size = 512, .eos = EOS};
    constraints_t *cons = constraints_new(&co);
    char ids[N][16];
    int rx[N];
    frame_t reqs[N];
    for (int i = 0; i < N; i++) {
        int like = i < N - 1 ? i : 0;
        rx[i] = like < STOPS ? like % 4 : 4;
        snprintf(ids[i], sizeof ids[i], "c%d", i);
        reqs[i] = constrained(ids[i], (uint64_t)i, (uint32_t)like, regex[rx[i]], 7 + (uint64_t)like / 4);
        if (rx[i] != 4) continue;
        reqs[i].params.n_stop_ids = 10;
        reqs[i].params.stop_ids = xmalloc(10 * sizeof(uint32_t));
        for (uint32_t d = 0; d < 10; d++) reqs[i].params.stop_ids[d] = '0' + d;
    }
    reqs[N - 1].params.logprobs = true;
    frames_t st = {0}, big = {0}, one = {0};
    prefill_opts_t po = prefill_opts(&model_a, 512, 4096, &st);
    po.constraints = cons;
    run_prefill(&po, reqs, N);
    decode_opts_t dopt = decode_opts(64, 1 << 20, 4096, &big);
    dopt.limits.eos = EOS, dopt.constraints = cons;
    decode_stats_t ds = run_decode(&dopt, &st, NULL);
    dopt = decode_opts(1, 1 << 20, 4096, &one);
    dopt.limits.eos = EOS, dopt.constraints = cons;
    run_decode(&dopt, &st, NULL);
    out_t ob[N], oo[N];
    outputs(&big, ids, N, ob), outputs(&one, ids, N, oo);
    int kept = 0, same = 0, stopped = 0, stop_ends = 0, stop_text = 0;
    for (int k = 0; k < N; k++) {
        kept += keeps_to(g[rx[k]], &ob[k]);
        same += same_output(&ob[k], &oo[k]);
        stopped += !strcmp(ob[k].end, "stop");
        for (size_t t = 0; rx[k] == 4 && t < ob[k].tokens.n; t++) {
            bool digit = ob[k].tokens.v[t] >= '0' && ob[k].tokens.v[t] <= '9';
            stop_ends += digit && t == ob[k].tokens.n - 1;
            stop_text += digit && t < ob[k].tokens.n - 1;
        }
    }
    printf("  %d constrained outputs, %d stopped; stop ids: %d ended an output, %d were text before the end; "
           "%llu EOS without a step\n", N, stopped, stop_ends, stop_text, (unsigned long long)ds.forced_ends);
    CHECK_EQ(kept, N);
    CHECK_EQ(same, N);
    CHECK(stopped >= 16 && stop_ends >= 1 && stop_text >= 1 && ds.forced_ends >= 1 && ds.grammar_tokens > 0);
    CHECK(same_output(&ob[0], &ob[N - 1]));
    /* refusals: a hash from another build, a first token the constraint does not allow, no constraints */
    frames_t bad = {0}, out = {0};
    frame_t r[3] = {constrained("h", 0, 1, "[0-9]+", 1), constrained("ok", 1, 2, "[0-9]+", 1), request("n", 2, 4, 3, 4)};
    r[0].constraint.has_hash = true;
    r[0].constraint.hash = grammar_key(v, CONSTRAINT_REGEX, "[0-9]+") ^ 1;
    r[2].constraint.kind = CONSTRAINT_JSON_OBJECT;
    po.ctx = &bad;
    run_prefill(&po, r, 3);
    CHECK(bad.n == 3 && bad.v[0].type == FRAME_ERROR && !strcmp(bad.v[0].code, "bad_constraint") &&
          strstr(bad.v[0].message, "another tokenizer or build") && bad.v[1].type == FRAME_STATE && bad.v[2].type == FRAME_STATE);
    if (bad.n == 3) {
        printf("  %s\n", bad.v[0].message);
        free(bad.v[1].constraint.text); /* its first token is a digit */
        bad.v[1].constraint.text = xstrdup("x+");
        buf_free(&bad.wire[1]);
        frame_encode(&bad.v[1], &bad.wire[1]);
    }
    dopt = decode_opts(64, 1 << 20, 4096, &out);
    dopt.limits.eos = EOS; /* and no constraints here: json_object is refused */
    run_decode(&dopt, &bad, NULL);
    CHECK(out.n == 2 && out.v[0].type == FRAME_ERROR && !strcmp(out.v[0].code, "unsupported") && out.v[1].type == FRAME_ERROR);
    frames_free(&out);
    dopt.constraints = cons, dopt.ctx = &out;
    run_decode(&dopt, &bad, NULL);
    bool refused = false;
    for (size_t i = 0; i < out.n; i++)
        if (!strcmp(out.v[i].id, "ok"))
            refused = out.v[i].type == FRAME_ERROR && !strcmp(out.v[i].code, "bad_state") && strstr(out.v[i].message, "constraint");
    CHECK(refused);
    frames_free(&out), frames_free(&bad);
    for (int k = 0; k < N; k++) ids_free(&ob[k].tokens), ids_free(&oo[k].tokens);
    for (int r5 = 0; r5 < 5; r5++) grammar_unref(g[r5]);
    frames_free(&st), frames_free(&big), frames_free(&one);
    constraints_free(cons);
    grammar_vocab_free(v);
}

static void test_setup(void) { CHECKF(false, "set-up failed: %s", err); }

static bool make(model_t *m, const char *name, uint64_t seed) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    return t_tiny_model(dir, "a", 512, seed, true, err, sizeof err) == 0 && model_open(m, dir, bk, NULL, err, sizeof err) == 0;
}

int main(void) {
    bk = backend_cpu_create(2);
    if (mkdtemp(tmp) && make(&model_a, "a", 1) && make(&model_b, "b", 2)) {
        RUN(test_state_frame_roundtrip);
        RUN(test_prefill_state_equals_direct);
        RUN(test_batching_changes_nothing);
        RUN(test_refusals_keep_serving);
        RUN(test_context_rule);
        RUN(test_pool_pressure);
        RUN(test_stops_meta_usage);
        RUN(test_constrained);
        model_close(&model_a);
        model_close(&model_b);
    } else {
        RUN(test_setup);
    }
    bk->destroy(bk);
    t_remove_tree(tmp);
    return t_finish();
}
