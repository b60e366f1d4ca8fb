#include "prefill_engine.h"
#include "constraints.h"
#include "forward.h"
#include "sampler.h"
#include "seqstate_io.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    frame_t req;
    uint64_t in_us;
    seqstate_t *st;        /* from its first chunk on */
    grammar_matcher_t *gm; /* the request's constraint, or NULL */
    uint32_t *mask;        /* its first token's allowed set, filled before the last chunk */
    sampler_params_t sp;
    uint32_t first;        /* the first output token, picked by the last chunk's forward */
    frame_logprob_t lp;
    int64_t done;          /* prompt tokens prefilled */
    struct job *next;
} job_t;

struct prefill_engine {
    prefill_opts_t o;
    job_t *head, *tail;    /* arrival order */
    int64_t pending;
    sampler_t *sampler;    /* host scratch for the rows the backend samples on the host */
    prefill_stats_t stats;
};

prefill_engine_t *prefill_new(const prefill_opts_t *o) {
    prefill_engine_t *p = xcalloc(1, sizeof *p);
    p->o = *o;
    if (p->o.token_budget < 1) p->o.token_budget = 1;
    p->sampler = sampler_new(o->m->cfg.vocab_size);
    return p;
}

static void job_free(job_t *j) {
    frame_free(&j->req);
    seqstate_free(j->st);
    grammar_matcher_free(j->gm);
    free(j->mask);
    free(j);
}

void prefill_free(prefill_engine_t *p) {
    for (job_t *j = p->head, *n; j; j = n) n = j->next, job_free(j);
    sampler_free(p->sampler);
    free(p);
}

static void refuse(prefill_engine_t *p, const frame_t *req, uint64_t in_us, const char *code, const char *msg) {
    p->stats.errors++;
    reply_refuse(p->o.emit, p->o.ctx, req, p->o.stage, in_us, code, msg);
}

void prefill_submit(prefill_engine_t *p, frame_t *f, uint64_t in_us) {
    const model_config_t *c = &p->o.m->cfg;
    char msg[256] = "";
    const char *code = "bad_request";
    p->stats.requests++;
    if (f->n_tokens == 0) snprintf(msg, sizeof msg, "the prompt is empty");
    for (uint32_t i = 0; !msg[0] && i < f->n_tokens; i++)
        if (f->tokens[i] >= (uint64_t)c->vocab_size)
            snprintf(msg, sizeof msg, "prompt token %u (at %u) is outside the model's vocabulary (%lld)", f->tokens[i], i,
                     (long long)c->vocab_size);
    if (!msg[0] && (int64_t)f->n_tokens >= p->o.context) {
        code = "context_length";
        snprintf(msg, sizeof msg, "the prompt has %u tokens; the context holds %lld, so a prompt may have at most %lld",
                 f->n_tokens, (long long)p->o.context, (long long)(p->o.context - 1));
    }
    grammar_matcher_t *gm = NULL;
    if (!msg[0]) constraints_matcher(p->o.constraints, f, &gm, &code, msg, sizeof msg);
    if (msg[0]) {
        refuse(p, f, in_us, code, msg);
        frame_free(f);
        return;
    }
    job_t *j = xcalloc(1, sizeof *j);
    j->gm = gm;
    j->req = *f;
    frame_init(f, FRAME_REQUEST);
    j->in_us = in_us;
    if (p->tail) p->tail->next = j;
    else p->head = j;
    p->tail = j;
    p->pending += j->req.n_tokens;
}

int64_t prefill_pending_tokens(const prefill_engine_t *p) { return p->pending; }
bool prefill_has_room(const prefill_engine_t *p) { return p->pending < 2 * p->o.token_budget; }

const prefill_stats_t *prefill_stats(const prefill_engine_t *p) { return &p->stats; }

/* The state frame of a completed prompt and its first token. */
static void finish_job(prefill_engine_t *p, job_t *j) {
    seqstate_t *st = j->st;
    frame_t *req = &j->req;
    uint64_t t1 = now_ns();
    if (j->first == SAMPLER_NONE) { /* cannot happen: a grammar always allows a first token */
        refuse(p, req, j->in_us, "internal", "the constraint allows no first token");
        return;
    }
    st->next_token = j->first;
    st->rng[0] = j->sp.seed;
    st->rng[1] = 0;
    buf_t bytes = {0};
    seqstate_serialize(st, &bytes);
    p->stats.serialize_ns += now_ns() - t1;
    p->stats.state_bytes += bytes.len;

    frame_t s;
    reply_init(&s, FRAME_STATE, req, p->o.stage, j->in_us);
    s.params = req->params; /* moved: the request is freed next */
    frame_params_init(&req->params);
    s.constraint = req->constraint;
    req->constraint = (frame_constraint_t){0};
    s.has_meta = true;
    s.meta = req->meta;
    req->meta = (frame_meta_t){0};
    s.meta.prompt_tokens = req->n_tokens;
    s.tokens = xmalloc(sizeof *s.tokens);
    s.tokens[0] = j->first;
    s.n_tokens = 1;
    if (j->sp.logprobs) {
        s.logprobs = xmalloc(sizeof *s.logprobs);
        s.logprobs[0] = j->lp;
    }
    s.state = bytes.data;
    s.state_len = bytes.len;
    reply_emit(p->o.emit, p->o.ctx, &s);
}

int64_t prefill_step(prefill_engine_t *p) {
    int64_t budget = p->o.token_budget, total = 0;
    int n = 0, cap = 16;
    fwd_seq_t *seqs = xmalloc((size_t)cap * sizeof *seqs);
    job_t **jobs = xmalloc((size_t)cap * sizeof *jobs);
    for (job_t *j = p->head; j && total < budget; j = j->next) {
        int64_t left = (int64_t)j->req.n_tokens - j->done, len = left < budget - total ? left : budget - total;
        if (n == cap) {
            cap *= 2;
            seqs = xrealloc(seqs, (size_t)cap * sizeof *seqs);
            jobs = xrealloc(jobs, (size_t)cap * sizeof *jobs);
        }
        if (!j->st) j->st = seqstate_new(p->o.m, p->o.qat);
        int64_t from = p->o.replay < 0 ? -1 : (int64_t)j->req.n_tokens - p->o.replay;
        if (p->o.replay >= 0 && from < 0) from = 0; /* a tail longer than the prompt: every layer on every token */
        seqs[n] = (fwd_seq_t){j->st, j->req.tokens + j->done, len, from, len == left ? FWD_LOGITS_LAST : FWD_LOGITS_NONE, NULL, 0, NULL};
        jobs[n++] = j;
        total += len;
    }
    /* a completing prompt's first token is picked by the backend from its last position */
    bk_pick_t *picks = xmalloc((size_t)(n + 1) * sizeof *picks);
    for (int i = 0; i < n; i++) {
        job_t *j = jobs[i];
        if (seqs[i].want != FWD_LOGITS_LAST) continue;
        j->sp = sampler_params(&j->req.params, j->req.id);
        if (j->gm) {
            uint64_t t = now_ns();
            j->mask = xmalloc(constraints_mask_words(p->o.constraints) * sizeof *j->mask);
            grammar_matcher_fill_mask(j->gm, j->mask);
            p->stats.mask_ns += now_ns() - t;
        }
        picks[i] = (bk_pick_t){&j->sp, j->st->T + seqs[i].n, j->mask, &j->first, &j->lp};
        seqs[i].pick = &picks[i];
    }
    char err[256];
    uint64_t t0 = now_ns();
    int rc = n ? forward_batch_pick(seqs, n, p->sampler, err, sizeof err) : 0;
    p->stats.forward_ns += now_ns() - t0;
    if (n) p->stats.calls++;
    p->stats.tokens += (uint64_t)total;
    p->pending -= total;
    for (int i = 0; i < n; i++) {
        job_t *j = jobs[i];
        j->done += seqs[i].n;
        bool complete = j->done == (int64_t)j->req.n_tokens;
        if (rc) /* cannot happen for checked prompts; still, each request gets its answer */
            refuse(p, &j->req, j->in_us, "internal", err);
        else if (complete)
            finish_job(p, j);
        if (!rc && !complete) continue;
        if (!complete) p->pending -= (int64_t)j->req.n_tokens - j->done;
        /* finished jobs sit at the front of the queue */
        job_t **link = &p->head, *prev = NULL;
        while (*link != j) prev = *link, link = &(*link)->next;
        *link = j->next;
        if (p->tail == j) p->tail = prev;
        job_free(j);
    }
    free(picks);
    free(seqs);
    free(jobs);
    return total;
}
