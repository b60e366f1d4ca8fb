#include "decode_engine.h"
#include "constraints.h"
#include "forward.h"
#include "sampler.h"
#include "seqstate_io.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct waiting {
    frame_t f;
    grammar_matcher_t *gm; /* the constraint at the start of the output; NULL: none */
    uint64_t in_us, arrived_ns;
    int64_t T, reserve;
    struct waiting *next;
} waiting_t;

typedef struct {
    frame_t f;             /* the state frame, its state bytes dropped once admitted */
    uint64_t in_us;
    seqstate_t *st;
    sampler_params_t sp;
    finish_t fin;
    grammar_matcher_t *gm; /* the constraint, or NULL */
    uint32_t *mask;        /* its allowed tokens for the next step */
    int64_t prompt, reserve;
    uint32_t last;         /* the newest output token: the next step's input */
} seq_t;

struct decode_engine {
    decode_opts_t o;
    waiting_t *head, *tail;
    size_t n_waiting;
    seq_t **run;
    size_t n_run;
    int64_t used;          /* pool tokens reserved by running sequences */
    sampler_t *sampler;    /* host scratch for the rows the backend samples on the host */
    decode_stats_t stats;
};

decode_engine_t *decode_new(const decode_opts_t *o) {
    decode_engine_t *d = xcalloc(1, sizeof *d);
    d->o = *o;
    if (d->o.max_batch < 1) d->o.max_batch = 1;
    d->run = xcalloc((size_t)d->o.max_batch, sizeof *d->run);
    d->sampler = sampler_new(o->m->cfg.vocab_size);
    return d;
}

static void seq_free(seq_t *s) {
    frame_free(&s->f);
    seqstate_free(s->st);
    finish_free(&s->fin);
    grammar_matcher_free(s->gm);
    free(s->mask);
    free(s);
}

void decode_free(decode_engine_t *d) {
    for (waiting_t *w = d->head, *n; w; w = n) {
        n = w->next;
        frame_free(&w->f);
        grammar_matcher_free(w->gm);
        free(w);
    }
    for (size_t i = 0; i < d->n_run; i++) seq_free(d->run[i]);
    free(d->run);
    sampler_free(d->sampler);
    free(d);
}

size_t decode_waiting(const decode_engine_t *d) { return d->n_waiting; }
bool decode_has_room(const decode_engine_t *d) { return d->n_waiting < (size_t)d->o.max_batch; }
size_t decode_running(const decode_engine_t *d) { return d->n_run; }
const decode_stats_t *decode_stats(const decode_engine_t *d) { return &d->stats; }

static void refuse(decode_engine_t *d, const frame_t *f, uint64_t in_us, const char *code, const char *msg) {
    d->stats.errors++;
    reply_refuse(d->o.emit, d->o.ctx, f, d->o.stage, in_us, code, msg);
}

/* Pool tokens a sequence of T positions may need: up to the last output token it can make. */
static int64_t reservation(const decode_engine_t *d, const frame_t *f, int64_t T) {
    int64_t max_new = f->params.max_tokens > 0 ? f->params.max_tokens : d->o.limits.default_max_tokens;
    int64_t room = d->o.limits.context - T;
    if (max_new > room) max_new = room;
    return T + (max_new > 1 ? max_new : 1);
}

/* The request's matcher at the start of its output: *gm (NULL without a constraint), or an
 * error frame and false. */
static bool new_matcher(decode_engine_t *d, const frame_t *f, uint64_t in_us, grammar_matcher_t **gm) {
    char msg[1200];
    const char *code;
    if (!constraints_matcher(d->o.constraints, f, gm, &code, msg, sizeof msg)) return true;
    refuse(d, f, in_us, code, msg);
    return false;
}

void decode_submit(decode_engine_t *d, frame_t *f, uint64_t in_us) {
    char err[512], msg[600];
    grammar_matcher_t *gm = NULL;
    d->stats.requests++;
    int64_t T = seqstate_peek_positions(f->state, f->state_len), need = T < 0 ? 0 : reservation(d, f, T);
    if (f->n_tokens == 0) {
        refuse(d, f, in_us, "bad_frame", "the state frame carries no first token");
    } else if (T < 0 || need > d->o.pool_tokens) { /* find out why: a bad state, or one too big for this worker */
        seqstate_t *st = seqstate_deserialize(d->o.m, f->state, f->state_len, err, sizeof err);
        if (!st) snprintf(msg, sizeof msg, "state refused: %s", err);
        else
            snprintf(msg, sizeof msg, "the sequence may reach %lld positions, more than this worker's whole pool (--pool-tokens %lld)",
                     (long long)need, (long long)d->o.pool_tokens);
        refuse(d, f, in_us, st ? "too_large" : "bad_state", msg);
        seqstate_free(st);
    } else if (new_matcher(d, f, in_us, &gm)) {
        waiting_t *w = xcalloc(1, sizeof *w);
        w->f = *f;
        w->gm = gm;
        frame_init(f, FRAME_STATE);
        w->in_us = in_us, w->arrived_ns = now_ns(), w->T = T, w->reserve = need;
        if (d->tail) d->tail->next = w;
        else d->head = w;
        d->tail = w;
        d->n_waiting++;
        return;
    }
    frame_free(f);
}

/* A tokens frame for s with one or more ids (and their logprobs when the request asked). */
static void emit_tokens(decode_engine_t *d, seq_t *s, const uint32_t *ids, uint32_t n, const frame_logprob_t *lp,
                        bool with_meta) {
    frame_t t;
    reply_init(&t, FRAME_TOKENS, &s->f, d->o.stage, s->in_us);
    t.tokens = xmalloc(n * sizeof *t.tokens);
    memcpy(t.tokens, ids, n * sizeof *t.tokens);
    t.n_tokens = n;
    if (lp && s->sp.logprobs) {
        t.logprobs = xmalloc(n * sizeof *t.logprobs);
        memcpy(t.logprobs, lp, n * sizeof *t.logprobs);
    }
    if (with_meta) {
        t.has_meta = true;
        frame_meta_copy(&t.meta, &s->f.meta);
    }
    reply_emit(d->o.emit, d->o.ctx, &t);
}

static void emit_done(decode_engine_t *d, seq_t *s, const char *reason) {
    frame_t f;
    reply_init(&f, FRAME_DONE, &s->f, d->o.stage, s->in_us);
    f.finish_reason = xstrdup(reason);
    f.prompt_tokens = (uint64_t)s->prompt;
    f.completion_tokens = (uint64_t)s->fin.produced;
    reply_emit(d->o.emit, d->o.ctx, &f);
}

static void release(decode_engine_t *d, seq_t *s) {
    d->used -= s->reserve;
    seq_free(s);
}

/* Where the grammar allows nothing but EOS after the tokens taken, EOS is the next token with
 * no forward step to draw it (one step less for the request), unless the request wants the
 * log-probability that step would give it. */
static bool ends_now(const decode_engine_t *d, seq_t *s) {
    return s->gm && !s->sp.logprobs && d->o.limits.eos >= 0 && grammar_matcher_must_end(s->gm);
}

/* Records an output token the grammar (if any) has accepted: the finish reason, or NULL. A stop
 * token id ends a constrained output only where the output is complete with it. */
static const char *push(seq_t *s, uint32_t token) {
    return finish_push(&s->fin, token, !s->gm || grammar_matcher_is_accepting(s->gm));
}

/* Appends EOS to ids[0..*n) and records it: the finish reason. */
static const char *take_eos(decode_engine_t *d, seq_t *s, uint32_t *ids, uint32_t *n) {
    uint32_t eos = (uint32_t)d->o.limits.eos;
    grammar_matcher_accept(s->gm, eos);
    ids[(*n)++] = eos;
    d->stats.forced_ends++;
    return push(s, eos);
}

/* Takes a waiting state into the running batch: its first frame goes out at once, and a
 * request that its first token already ends is done here. */
static void admit(decode_engine_t *d, waiting_t *w) {
    char err[512], msg[600];
    uint64_t t0 = now_ns();
    d->stats.queue_ns += t0 - w->arrived_ns;
    seqstate_t *st = seqstate_deserialize(d->o.m, w->f.state, w->f.state_len, err, sizeof err);
    d->stats.deserialize_ns += now_ns() - t0;
    uint32_t first = w->f.tokens[w->f.n_tokens - 1];
    const char *code = "bad_state";
    if (!st) {
        snprintf(msg, sizeof msg, "state refused: %s", err);
    } else if (st->next_token != (int64_t)first) {
        snprintf(msg, sizeof msg, "the state's first token %lld is not the frame's last token %u", (long long)st->next_token, first);
        seqstate_free(st), st = NULL;
    }
    seq_t *s = xcalloc(1, sizeof *s);
    s->f = w->f, s->in_us = w->in_us, s->st = st, s->prompt = w->T, s->gm = w->gm;
    free(w);
    free(s->f.state);
    s->f.state = NULL, s->f.state_len = 0;
    finish_limits_t lim = d->o.limits;
    if (st && finish_init(&s->fin, &s->f, s->prompt, &lim, d->o.tok, msg, sizeof msg)) {
        code = "unsupported";
        seqstate_free(st), s->st = st = NULL;
    }
    for (uint32_t i = 0; st && s->gm && i < s->f.n_tokens; i++)
        if (!grammar_matcher_accept(s->gm, s->f.tokens[i])) {
            snprintf(msg, sizeof msg, "output token %u (at %u) breaks the request's constraint", s->f.tokens[i], i);
            seqstate_free(st), s->st = st = NULL;
        }
    if (st && s->gm) grammar_matcher_rollback(s->gm, s->f.n_tokens); /* replayed below, token by token */
    if (!st) {
        refuse(d, &s->f, s->in_us, code, msg);
        seq_free(s);
        return;
    }
    s->sp = sampler_params(&s->f.params, s->f.id);
    s->sp.seed = st->rng[0]; /* the state's record of the seed prefill drew with */
    s->reserve = reservation(d, &s->f, s->prompt);
    d->used += s->reserve;
    if ((uint64_t)d->used > d->stats.peak_pool) d->stats.peak_pool = (uint64_t)d->used;
    if (s->gm) s->mask = xmalloc(constraints_mask_words(d->o.constraints) * sizeof *s->mask);
    const char *reason = NULL;
    for (uint32_t i = 0; i < s->f.n_tokens && !reason; i++) {
        if (s->gm) grammar_matcher_accept(s->gm, s->f.tokens[i]);
        reason = push(s, s->f.tokens[i]);
    }
    uint32_t *ids = xmalloc((s->f.n_tokens + 1) * sizeof *ids), n = s->f.n_tokens;
    memcpy(ids, s->f.tokens, n * sizeof *ids);
    if (!reason && ends_now(d, s)) reason = take_eos(d, s, ids, &n);
    emit_tokens(d, s, ids, n, s->f.logprobs, true);
    free(ids);
    if (reason) {
        emit_done(d, s, reason);
        release(d, s);
        return;
    }
    s->last = first;
    d->run[d->n_run++] = s;
}

size_t decode_step(decode_engine_t *d) {
    size_t moved = 0;
    while (d->head && d->n_run < (size_t)d->o.max_batch && d->used + d->head->reserve <= d->o.pool_tokens) {
        waiting_t *w = d->head;
        d->head = w->next;
        if (!d->head) d->tail = NULL;
        d->n_waiting--;
        admit(d, w);
        moved++;
    }
    size_t n = d->n_run;
    if (!n) return moved;
    seqstate_t **sts = xmalloc(n * sizeof *sts);
    uint32_t *ids = xmalloc(n * sizeof *ids);
    bk_pick_t *picks = xmalloc(n * sizeof *picks);
    frame_logprob_t *lps = xmalloc(n * sizeof *lps);
    uint64_t *mask_ns = xcalloc(n, sizeof *mask_ns);
    for (size_t i = 0; i < n; i++) {
        seq_t *s = d->run[i];
        sts[i] = s->st, ids[i] = s->last;
        uint64_t t = now_ns();
        if (s->gm) grammar_matcher_fill_mask(s->gm, s->mask), mask_ns[i] = now_ns() - t;
        /* the step's input is in ids: the pick writes the next token over s->last */
        picks[i] = (bk_pick_t){&s->sp, s->st->T + 1, s->gm ? s->mask : NULL, &s->last, &lps[i]};
    }
    char err[256];
    uint64_t t0 = now_ns();
    int rc = forward_step_batch_pick(sts, ids, (int)n, picks, d->sampler, err, sizeof err);
    uint64_t t1 = now_ns();
    d->stats.forward_ns += t1 - t0;
    d->stats.steps++;
    d->stats.batch_sum += n;
    if (n > d->stats.peak_batch) d->stats.peak_batch = n;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        seq_t *s = d->run[i];
        const char *reason = NULL;
        if (rc) { /* cannot happen for checked states; still, each request gets its answer */
            refuse(d, &s->f, s->in_us, "internal", err);
            release(d, s);
            continue;
        }
        d->stats.tokens++;
        uint64_t t4 = now_ns();
        if (s->gm && !grammar_matcher_accept(s->gm, s->last)) { /* only if the mask was empty */
            refuse(d, &s->f, s->in_us, "internal", "the constraint allows no next token");
            release(d, s);
            continue;
        }
        uint64_t t5 = now_ns();
        uint32_t out[2] = {s->last}, n_out = 1;
        reason = push(s, s->last);
        uint64_t t6 = now_ns();
        if (!reason && ends_now(d, s)) reason = take_eos(d, s, out, &n_out);
        if (s->gm) { /* mask, accept, the end check: what the grammar adds to a token */
            uint64_t g = mask_ns[i] + (t5 - t4) + (now_ns() - t6);
            d->stats.grammar_tokens++;
            d->stats.grammar_ns += g;
            if (g > d->stats.grammar_max_ns) d->stats.grammar_max_ns = g;
        }
        emit_tokens(d, s, out, n_out, &lps[i], false);
        if (reason) {
            emit_done(d, s, reason);
            release(d, s);
        } else
            d->run[kept++] = s;
    }
    d->n_run = kept;
    free(sts), free(ids), free(picks), free(lps), free(mask_ns);
    return moved + n;
}
