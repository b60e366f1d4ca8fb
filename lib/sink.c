#include "sink.h"
#include "log.h"
#include "response.h"
#include "u64map.h"
#include "utf8stream.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *id;
    bool has_meta;
    frame_meta_t meta;  /* kept for an error frame that arrives without its own */
    response_t *response;
} pending_t;

struct sink {
    const tokenizer_t *tok;
    FILE *out;
    sink_options_t opts;
    stage_stats_t *stats;
    u64map_t pending;   /* seq -> pending_t*: requests with output so far but no answer */
    u64map_t answered;  /* seq -> (void *)1 */
    u64map_t held;      /* --ordered: seq -> char* line not yet written */
    uint64_t next_seq;  /* --ordered: the next seq to write */
};

#define ANSWERED ((void *)1)

sink_t *sink_new(const tokenizer_t *tok, FILE *out, sink_options_t opts, stage_stats_t *stats)
{
    sink_t *s = xcalloc(1, sizeof *s);
    s->tok = tok;
    s->out = out;
    s->opts = opts;
    s->stats = stats;
    return s;
}

static void write_text(sink_t *s, char *line)
{
    fputs(line, s->out);
    fputc('\n', s->out);
    if (s->opts.stream) fflush(s->out);
    free(line);
}

static char *dump(json_t *obj)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!text) die("cannot serialise an output line");
    return text;
}

static void flush_held(sink_t *s)
{
    char *line;
    while ((line = u64map_remove(&s->held, s->next_seq))) {
        write_text(s, line);
        s->next_seq++;
    }
}

static json_t *trace_json(const frame_t *f, uint64_t in_us)
{
    json_t *hops = json_array();
    for (uint32_t i = 0; f && i < f->n_hops; i++)
        json_array_append_new(hops, json_pack("[s, I, I]", f->hops[i].stage, (json_int_t)f->hops[i].in_us,
                                              (json_int_t)f->hops[i].out_us));
    json_array_append_new(hops, json_pack("[s, I, I]", "di-detok", (json_int_t)in_us, (json_int_t)wall_us()));
    return hops;
}

/* Writes a request's one final line and marks it answered. */
static void answer(sink_t *s, uint64_t seq, json_t *line, const frame_t *f, uint64_t in_us)
{
    if (s->opts.trace) json_object_set_new(line, "trace", trace_json(f, in_us));
    u64map_put(&s->answered, seq, ANSWERED);
    s->stats->requests++;
    char *text = dump(line);
    if (!s->opts.ordered) {
        write_text(s, text);
        return;
    }
    u64map_put(&s->held, seq, text);
    flush_held(s);
}

static void free_pending(pending_t *p)
{
    response_free(p->response);
    frame_meta_free(&p->meta);
    free(p->id);
    free(p);
}

static void drop_pending(sink_t *s, uint64_t seq)
{
    pending_t *p = u64map_remove(&s->pending, seq);
    if (p) free_pending(p);
}

static void answer_error(sink_t *s, uint64_t seq, const char *id, const frame_meta_t *meta, const char *stage,
                         const char *code, const char *message, const frame_t *f, uint64_t in_us)
{
    drop_pending(s, seq);
    s->stats->errors++;
    answer(s, seq, response_error_json(id, meta, stage, code, message), f, in_us);
}

/* The prompt of a request frame, as text (special tokens spelled, bad UTF-8 as U+FFFD). */
static json_t *roundtrip_json(sink_t *s, const frame_t *f, char *err, size_t errlen)
{
    buf_t bytes = {0}, text = {0};
    if (tokenizer_decode(s->tok, f->tokens, f->n_tokens, &bytes) != 0) {
        snprintf(err, errlen, "the prompt holds a token id outside the vocabulary");
        buf_free(&bytes);
        return NULL;
    }
    utf8stream_t u = {0};
    utf8stream_push(&u, bytes.data, bytes.len, &text);
    utf8stream_finish(&u, &text);
    json_t *line = json_pack("{s:s, s:s%, s:I}", "id", f->id, "prompt", text.data ? (char *)text.data : "", text.len,
                             "prompt_tokens", (json_int_t)f->n_tokens);
    buf_free(&bytes);
    buf_free(&text);
    return line;
}

static pending_t *pending_for(sink_t *s, const frame_t *f)
{
    pending_t *p = u64map_get(&s->pending, f->seq);
    if (p) return p;
    if (!f->has_meta) log_warn("request %s: output without its meta; answering in the plain-prompt shape", f->id);
    p = xcalloc(1, sizeof *p);
    p->id = xstrdup(f->id);
    p->has_meta = f->has_meta;
    if (f->has_meta) frame_meta_copy(&p->meta, &f->meta);
    p->response = response_new(s->tok, f->id, f->has_meta ? &f->meta : NULL);
    u64map_put(&s->pending, f->seq, p);
    return p;
}

/* The meta a request is known by: its frame's, else what earlier frames brought. */
static const frame_meta_t *meta_of(sink_t *s, const frame_t *f)
{
    if (f->has_meta) return &f->meta;
    pending_t *p = u64map_get(&s->pending, f->seq);
    return p && p->has_meta ? &p->meta : NULL;
}

static void write_delta(sink_t *s, json_t *delta)
{
    if (delta) write_text(s, dump(delta));
}

void sink_frame(sink_t *s, const frame_t *f)
{
    uint64_t in_us = wall_us();
    char err[256];
    if (u64map_get(&s->answered, f->seq)) {
        log_warn("a %s frame for request %s (seq %llu) after its answer: ignored", frame_type_name(f->type),
                 f->id ? f->id : "?", (unsigned long long)f->seq);
        return;
    }
    switch (f->type) {
    case FRAME_REQUEST: {
        json_t *line = roundtrip_json(s, f, err, sizeof err);
        if (line) answer(s, f->seq, line, f, in_us);
        else answer_error(s, f->seq, f->id, &f->meta, "di-detok", "bad_frame", err, f, in_us);
        break;
    }
    case FRAME_STATE:
        answer_error(s, f->seq, f->id, &f->meta, "di-detok", "misrouted",
                     "a state frame reached the sink: the pipeline has no di-decode after di-prefill", f, in_us);
        break;
    case FRAME_TOKENS: {
        pending_t *p = pending_for(s, f);
        json_t *delta = NULL;
        if (response_push(p->response, f->tokens, f->n_tokens, s->opts.stream ? &delta : NULL, err, sizeof err) < 0)
            answer_error(s, f->seq, f->id, meta_of(s, f), "di-detok", "bad_frame", err, f, in_us);
        else
            write_delta(s, delta);
        break;
    }
    case FRAME_DONE: {
        pending_t *p = pending_for(s, f);
        json_t *delta = NULL;
        json_t *line = response_finish(p->response, f->finish_reason, f->prompt_tokens, f->completion_tokens,
                                       s->opts.stream ? &delta : NULL);
        write_delta(s, delta);
        drop_pending(s, f->seq);
        answer(s, f->seq, line, f, in_us);
        break;
    }
    case FRAME_ERROR: {
        json_t *line = response_error_json(f->id, meta_of(s, f), f->stage, f->code, f->message);
        s->stats->errors++;
        drop_pending(s, f->seq);
        answer(s, f->seq, line, f, in_us);
        break;
    }
    case FRAME_EOS:
        break; /* consumed by the transport */
    }
}

void sink_bad_frame(sink_t *s, const in_bad_t *bad)
{
    if (!bad->id) {
        log_error("unreadable frame (no request id): %s", bad->reason);
        s->stats->bad_input++;
        return;
    }
    if (u64map_get(&s->answered, bad->seq)) {
        log_error("unreadable frame for answered request %s: %s", bad->id, bad->reason);
        return;
    }
    answer_error(s, bad->seq, bad->id, NULL, "di-detok", "bad_frame", bad->reason, NULL, wall_us());
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t sink_finish(sink_t *s, const ledger_t *ledger)
{
    uint64_t lost = 0;
    /* Requests with output but no final frame. */
    uint64_t *seqs = xmalloc((s->pending.count + s->held.count + 1) * sizeof *seqs);
    size_t n = 0;
    for (size_t i = 0; i < s->pending.cap; i++)
        if (s->pending.values[i]) seqs[n++] = s->pending.keys[i];
    for (size_t i = 0; i < n; i++) {
        pending_t *p = u64map_remove(&s->pending, seqs[i]);
        s->stats->errors++;
        answer(s, seqs[i], response_error_json(p->id, p->has_meta ? &p->meta : NULL, "di-detok", "incomplete",
                                               "the output ended without a final frame (did an upstream stage stop?)"),
               NULL, wall_us());
        free_pending(p);
        lost++;
    }
    /* Requests announced by the origin that never showed up. */
    for (uint64_t seq = 0; ledger->heard && seq < ledger->announced; seq++) {
        if (u64map_get(&s->answered, seq)) continue;
        const char *id = seq < ledger->n_ids && ledger->ids[seq][0] ? ledger->ids[seq] : NULL;
        char message[160];
        snprintf(message, sizeof message, "request seq %llu was announced by the origin but never answered "
                 "(a worker may have died)", (unsigned long long)seq);
        answer_error(s, seq, id, NULL, "di-detok", "lost", message, NULL, wall_us());
        lost++;
    }
    /* --ordered: whatever is still held (seqs beyond a gap) goes out in seq order. */
    seqs = xrealloc(seqs, (s->held.count + 1) * sizeof *seqs);
    n = 0;
    for (size_t i = 0; i < s->held.cap; i++)
        if (s->held.values[i]) seqs[n++] = s->held.keys[i];
    qsort(seqs, n, sizeof *seqs, compare_u64);
    for (size_t i = 0; i < n; i++) write_text(s, u64map_remove(&s->held, seqs[i]));
    free(seqs);
    fflush(s->out);
    return lost;
}

void sink_free(sink_t *s)
{
    for (size_t i = 0; i < s->pending.cap; i++)
        if (s->pending.values[i]) free_pending(s->pending.values[i]);
    u64map_free(&s->pending);
    u64map_free(&s->answered);
    u64map_free(&s->held);
    if (s->out != stdout) fclose(s->out);
    free(s);
}
