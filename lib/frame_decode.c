/* Strict frame decoding: every field typed and bounded, unknown frame types and missing
 * fields named in the error. Unknown keys are skipped (newer senders may add fields). */
#include "frame.h"
#include "mpread.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mpr_t r;
    const char *field; /* the field being read, for messages */
    char msg[200];
    bool failed;
} dec_t;

static bool bad(dec_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool bad(dec_t *d, const char *fmt, ...)
{
    if (d->failed) return false;
    d->failed = true;
    char detail[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (d->field) snprintf(d->msg, sizeof d->msg, "field '%s': %s", d->field, detail);
    else snprintf(d->msg, sizeof d->msg, "%s", detail);
    return false;
}

/* Turn a reader failure into a decoder failure once. */
static bool check(dec_t *d, bool ok)
{
    if (ok) return true;
    if (d->r.status == MPR_SHORT) return bad(d, "truncated frame");
    return bad(d, "%s", d->r.err);
}

static bool read_text(dec_t *d, uint32_t max, char **out)
{
    const char *s;
    uint32_t n;
    if (!check(d, mpr_str(&d->r, &s, &n))) return false;
    if (n > max) return bad(d, "string of %u bytes exceeds the limit of %u", n, max);
    if (memchr(s, 0, n)) return bad(d, "string contains a NUL byte");
    if (!utf8_valid(s, n)) return bad(d, "string is not valid UTF-8");
    free(*out);
    *out = xstrndup(s, n);
    return true;
}

static bool read_u64(dec_t *d, uint64_t *v)
{
    return check(d, mpr_uint(&d->r, v));
}

static bool read_bounded(dec_t *d, int64_t min, int64_t max, int64_t *v)
{
    if (!check(d, mpr_int(&d->r, v))) return false;
    if (*v < min || *v > max) return bad(d, "%lld outside [%lld, %lld]", (long long)*v, (long long)min, (long long)max);
    return true;
}

static bool read_unit_number(dec_t *d, double max, double *v)
{
    if (!check(d, mpr_number(&d->r, v))) return false;
    if (!(*v >= 0 && *v <= max)) return bad(d, "%g outside [0, %g]", *v, max);
    return true;
}

static bool read_ids(dec_t *d, uint32_t **ids, uint32_t *count)
{
    uint32_t n;
    if (!check(d, mpr_array(&d->r, &n))) return false;
    if (n > FRAME_MAX_TOKENS) return bad(d, "%u token ids exceed the limit of %u", n, FRAME_MAX_TOKENS);
    free(*ids);
    *ids = n ? xmalloc(n * sizeof **ids) : NULL;
    *count = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        if (!read_u64(d, &v)) return false;
        if (v > UINT32_MAX) return bad(d, "token id %llu out of range", (unsigned long long)v);
        (*ids)[(*count)++] = (uint32_t)v;
    }
    return true;
}

static bool read_strings(dec_t *d, uint64_t max, char ***out, uint64_t *count)
{
    uint32_t n;
    if (!check(d, mpr_array(&d->r, &n))) return false;
    if (n > max) return bad(d, "%u strings exceed the limit of %llu", n, (unsigned long long)max);
    *out = n ? xcalloc(n, sizeof **out) : NULL;
    *count = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!read_text(d, FRAME_MAX_STRING, &(*out)[i])) {
            *count = i + 1;
            return false;
        }
        *count = i + 1;
    }
    return true;
}

static bool read_key(dec_t *d, const char **key, uint32_t *len)
{
    d->field = NULL;
    return check(d, mpr_str(&d->r, key, len));
}

static bool key_is(const char *key, uint32_t len, const char *name)
{
    return strlen(name) == len && !memcmp(key, name, len);
}

/* Iterate a map, calling field() for each key; unknown keys are skipped. The callback
 * reports whether it knew the key through *known. */
typedef bool (*field_fn)(dec_t *d, const char *key, uint32_t len, void *ctx, bool *known);

static bool read_map(dec_t *d, field_fn field, void *ctx)
{
    uint32_t n;
    const char *outer = d->field;
    if (!check(d, mpr_map(&d->r, &n))) return false;
    for (uint32_t i = 0; i < n; i++) {
        const char *key;
        uint32_t len;
        if (!read_key(d, &key, &len)) return false;
        char name[64];
        snprintf(name, sizeof name, "%s%s%.*s", outer ? outer : "", outer ? "." : "", (int)(len < 40 ? len : 40), key);
        d->field = name;
        bool known = false;
        if (!field(d, key, len, ctx, &known)) return false;
        if (!known && !check(d, mpr_skip(&d->r))) return false;
        d->field = outer;
    }
    return true;
}

/* ---- nested maps -------------------------------------------------------------------- */

static bool params_field(dec_t *d, const char *k, uint32_t n, void *ctx, bool *known)
{
    frame_params_t *p = ctx;
    *known = true;
    if (key_is(k, n, "max_tokens")) return read_bounded(d, 0, INT32_MAX, &p->max_tokens);
    if (key_is(k, n, "temperature")) return read_unit_number(d, 100.0, &p->temperature);
    if (key_is(k, n, "top_p")) return read_unit_number(d, 1.0, &p->top_p);
    if (key_is(k, n, "min_p")) return read_unit_number(d, 1.0, &p->min_p);
    if (key_is(k, n, "top_k")) return read_bounded(d, 0, INT32_MAX, &p->top_k);
    if (key_is(k, n, "seed")) return p->has_seed = true, read_u64(d, &p->seed);
    if (key_is(k, n, "logprobs")) return check(d, mpr_bool(&d->r, &p->logprobs));
    if (key_is(k, n, "top_logprobs")) return read_bounded(d, 0, FRAME_MAX_TOP, &p->top_logprobs);
    if (key_is(k, n, "stop_token_ids")) return read_ids(d, &p->stop_ids, &p->n_stop_ids);
    *known = false;
    return true;
}

static bool meta_field(dec_t *d, const char *k, uint32_t n, void *ctx, bool *known)
{
    frame_meta_t *m = ctx;
    *known = true;
    if (key_is(k, n, "shape")) {
        char *s = NULL;
        if (!read_text(d, 16, &s)) return free(s), false;
        bool ok = true;
        if (!strcmp(s, "prompt")) m->shape = SHAPE_PROMPT;
        else if (!strcmp(s, "chat")) m->shape = SHAPE_CHAT;
        else if (!strcmp(s, "batch")) m->shape = SHAPE_BATCH;
        else ok = bad(d, "unknown shape '%s'", s);
        free(s);
        return ok;
    }
    if (key_is(k, n, "custom_id")) return read_text(d, 4096, &m->custom_id);
    if (key_is(k, n, "model")) return read_text(d, 4096, &m->model);
    if (key_is(k, n, "thinking")) return check(d, mpr_bool(&d->r, &m->thinking));
    if (key_is(k, n, "tools")) return check(d, mpr_bool(&d->r, &m->tools));
    if (key_is(k, n, "continuation")) return check(d, mpr_bool(&d->r, &m->continuation));
    if (key_is(k, n, "in_tool_calls")) return check(d, mpr_bool(&d->r, &m->in_tool_calls));
    if (key_is(k, n, "json")) return check(d, mpr_bool(&d->r, &m->parse_json));
    if (key_is(k, n, "prompt_tokens")) return read_u64(d, &m->prompt_tokens);
    if (key_is(k, n, "stop")) {
        uint64_t count = 0;
        for (uint32_t i = 0; i < m->n_stop; i++) free(m->stop[i]);
        free(m->stop);
        m->stop = NULL;
        bool ok = read_strings(d, FRAME_MAX_STOPS, &m->stop, &count);
        m->n_stop = (uint32_t)count;
        return ok;
    }
    *known = false;
    return true;
}

static bool constraint_field(dec_t *d, const char *k, uint32_t n, void *ctx, bool *known)
{
    frame_constraint_t *c = ctx;
    *known = true;
    if (key_is(k, n, "value")) return read_text(d, FRAME_MAX_STRING, &c->text);
    if (key_is(k, n, "hash")) return c->has_hash = true, read_u64(d, &c->hash);
    if (key_is(k, n, "type")) {
        char *s = NULL;
        if (!read_text(d, 32, &s)) return free(s), false;
        bool ok = true;
        if (!strcmp(s, "json_object")) c->kind = CONSTRAINT_JSON_OBJECT;
        else if (!strcmp(s, "json_schema")) c->kind = CONSTRAINT_JSON_SCHEMA;
        else if (!strcmp(s, "regex")) c->kind = CONSTRAINT_REGEX;
        else ok = bad(d, "unknown constraint type '%s'", s);
        free(s);
        return ok;
    }
    *known = false;
    return true;
}

static bool usage_field(dec_t *d, const char *k, uint32_t n, void *ctx, bool *known)
{
    frame_t *f = ctx;
    *known = true;
    if (key_is(k, n, "prompt_tokens")) return read_u64(d, &f->prompt_tokens);
    if (key_is(k, n, "completion_tokens")) return read_u64(d, &f->completion_tokens);
    *known = false;
    return true;
}

static bool read_trace(dec_t *d, frame_t *f)
{
    uint32_t n;
    if (!check(d, mpr_array(&d->r, &n))) return false;
    if (n > FRAME_MAX_HOPS) return bad(d, "%u hops exceed the limit of %d", n, FRAME_MAX_HOPS);
    f->hops = n ? xcalloc(n, sizeof *f->hops) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t parts;
        if (!check(d, mpr_array(&d->r, &parts))) return false;
        if (parts != 3) return bad(d, "a hop is [stage, in_us, out_us], got %u items", parts);
        frame_hop_t *h = &f->hops[i];
        f->n_hops = i + 1;
        if (!read_text(d, 256, &h->stage) || !read_u64(d, &h->in_us) || !read_u64(d, &h->out_us)) return false;
    }
    return true;
}

static bool read_logprobs(dec_t *d, frame_t *f, uint32_t *count)
{
    uint32_t n;
    if (!check(d, mpr_array(&d->r, &n))) return false;
    if (n > FRAME_MAX_TOKENS) return bad(d, "%u entries exceed the limit", n);
    *count = n;
    free(f->logprobs);
    f->logprobs = xcalloc(n ? n : 1, sizeof *f->logprobs);
    for (uint32_t i = 0; i < n; i++) {
        frame_logprob_t *lp = &f->logprobs[i];
        uint32_t parts, top;
        double v;
        if (!check(d, mpr_array(&d->r, &parts))) return false;
        if (parts != 2) return bad(d, "an entry is [logprob, top], got %u items", parts);
        if (!check(d, mpr_number(&d->r, &v))) return false;
        lp->logprob = (float)v;
        if (!check(d, mpr_array(&d->r, &top))) return false;
        if (top > FRAME_MAX_TOP) return bad(d, "%u top entries exceed the limit of %d", top, FRAME_MAX_TOP);
        lp->n_top = top;
        for (uint32_t k = 0; k < top; k++) {
            uint64_t id;
            if (!check(d, mpr_array(&d->r, &parts))) return false;
            if (parts != 2) return bad(d, "a top entry is [id, logprob], got %u items", parts);
            if (!read_u64(d, &id) || !check(d, mpr_number(&d->r, &v))) return false;
            if (id > UINT32_MAX) return bad(d, "token id out of range");
            lp->top_ids[k] = (uint32_t)id;
            lp->top_logprobs[k] = (float)v;
        }
    }
    return true; /* the count is checked against the tokens once both are known */
}

/* ---- the top-level map ---------------------------------------------------------------- */

typedef struct {
    frame_t *f;
    uint64_t version;
    char *type;
    uint32_t seen;          /* bit per field, to refuse duplicates and find missing ones */
    uint32_t n_logprobs;
    bool id_nil;
} top_t;

enum {
    F_V, F_TYPE, F_ID, F_SEQ, F_TRACE, F_PROMPT, F_TOKENS, F_PARAMS, F_CONSTRAINT, F_META, F_LOGPROBS,
    F_STATE, F_FINISH, F_USAGE, F_STAGE, F_CODE, F_MESSAGE, F_SENDER, F_ORIGIN, F_ANNOUNCED, F_SERVED, F_IDS,
    F_COUNT
};
static const char *field_names[F_COUNT] = {
    "v", "type", "id", "seq", "trace", "prompt", "tokens", "params", "constraint", "meta", "logprobs",
    "state", "finish_reason", "usage", "stage", "code", "message", "sender", "origin", "announced", "served", "ids"};

static bool top_field(dec_t *d, const char *k, uint32_t n, void *ctx, bool *known)
{
    top_t *t = ctx;
    frame_t *f = t->f;
    int which = -1;
    for (int i = 0; i < F_COUNT; i++)
        if (key_is(k, n, field_names[i])) which = i;
    *known = which >= 0;
    if (which < 0) return true;
    if (t->seen & (1u << which)) return bad(d, "duplicate field");
    t->seen |= 1u << which;
    switch (which) {
    case F_V: return read_u64(d, &t->version);
    case F_TYPE: return read_text(d, 32, &t->type);
    case F_ID:
        if (mpr_peek(&d->r) == MPT_NIL) return t->id_nil = true, check(d, mpr_nil(&d->r));
        return read_text(d, 1024, &f->id);
    case F_SEQ: return read_u64(d, &f->seq);
    case F_TRACE: return read_trace(d, f);
    case F_PROMPT: case F_TOKENS:
        if (t->seen & (1u << (which == F_PROMPT ? F_TOKENS : F_PROMPT))) return bad(d, "both prompt and tokens given");
        return read_ids(d, &f->tokens, &f->n_tokens);
    case F_PARAMS: return read_map(d, params_field, &f->params);
    case F_CONSTRAINT: return read_map(d, constraint_field, &f->constraint);
    case F_META: f->has_meta = true; return read_map(d, meta_field, &f->meta);
    case F_LOGPROBS: return read_logprobs(d, f, &t->n_logprobs);
    case F_STATE: {
        const uint8_t *bytes;
        uint32_t n;
        if (!check(d, mpr_bin(&d->r, &bytes, &n))) return false;
        f->state = xmalloc(n ? n : 1);
        memcpy(f->state, bytes, n);
        f->state_len = n;
        return true;
    }
    case F_FINISH: return read_text(d, 64, &f->finish_reason);
    case F_USAGE: return read_map(d, usage_field, f);
    case F_STAGE: return read_text(d, 256, &f->stage);
    case F_CODE: return read_text(d, 256, &f->code);
    case F_MESSAGE: return read_text(d, 65536, &f->message);
    case F_SENDER: return read_text(d, 256, &f->eos.sender);
    case F_ORIGIN: return read_text(d, 256, &f->eos.origin);
    case F_ANNOUNCED: return read_u64(d, &f->eos.announced);
    case F_SERVED: return read_u64(d, &f->eos.served);
    case F_IDS: return read_strings(d, FRAME_MAX_IDS, &f->eos.ids, &f->eos.n_ids);
    }
    return true;
}

static bool require(dec_t *d, const top_t *t, uint32_t fields)
{
    for (int i = 0; i < F_COUNT; i++)
        if ((fields & (1u << i)) && !(t->seen & (1u << i))) {
            d->field = NULL;
            return bad(d, "%s frame without required field '%s'", t->type, field_names[i]);
        }
    return true;
}

static bool validate(dec_t *d, top_t *t)
{
    frame_t *f = t->f;
    d->field = NULL;
    if (!(t->seen & (1u << F_V))) return bad(d, "frame without required field 'v' (protocol version)");
    if (t->version != FRAME_VERSION)
        return bad(d, "unsupported protocol version %llu (this build speaks %d)", (unsigned long long)t->version,
                   FRAME_VERSION);
    if (!t->type) return bad(d, "frame without required field 'type'");
    static const frame_type_t types[] = {FRAME_REQUEST, FRAME_STATE, FRAME_TOKENS, FRAME_DONE, FRAME_ERROR, FRAME_EOS};
    bool found = false;
    for (size_t i = 0; i < DI_ARRAY_LEN(types); i++)
        if (!strcmp(t->type, frame_type_name(types[i]))) f->type = types[i], found = true;
    if (!found) return bad(d, "unknown frame type '%s'", t->type);
    switch (f->type) {
    case FRAME_REQUEST:
        if (!require(d, t, 1u << F_ID | 1u << F_PROMPT)) return false;
        f->has_meta = true; /* a request without meta is a plain-prompt request */
        break;
    case FRAME_STATE:
        if (!require(d, t, 1u << F_ID | 1u << F_TOKENS | 1u << F_STATE)) return false;
        f->has_meta = true;
        __attribute__((fallthrough)); /* tokens and logprobs as in a tokens frame */
    case FRAME_TOKENS:
        if (!require(d, t, 1u << F_ID | 1u << F_TOKENS)) return false;
        if (f->logprobs && t->n_logprobs != f->n_tokens)
            return bad(d, "logprobs has %u entries for %u tokens", t->n_logprobs, f->n_tokens);
        break;
    case FRAME_DONE:
        if (!require(d, t, 1u << F_ID | 1u << F_FINISH)) return false;
        break;
    case FRAME_ERROR:
        if (!require(d, t, 1u << F_ID | 1u << F_MESSAGE)) return false;
        break;
    case FRAME_EOS:
        if (!require(d, t, 1u << F_SENDER | 1u << F_ORIGIN | 1u << F_ANNOUNCED | 1u << F_SERVED)) return false;
        if (f->eos.n_ids && f->eos.n_ids != f->eos.announced)
            return bad(d, "eos lists %llu ids for %llu announced requests", (unsigned long long)f->eos.n_ids,
                       (unsigned long long)f->eos.announced);
        break;
    }
    if (t->id_nil && f->type != FRAME_ERROR) return bad(d, "%s frame with a nil id", t->type);
    if (f->type != FRAME_REQUEST && (t->seen & (1u << F_PROMPT)))
        return bad(d, "field 'prompt' belongs to request frames");
    if (f->type != FRAME_STATE && (t->seen & (1u << F_STATE)))
        return bad(d, "field 'state' belongs to state frames");
    if (f->type == FRAME_REQUEST && (t->seen & (1u << F_TOKENS)))
        return bad(d, "request frames carry 'prompt', not 'tokens'");
    if (f->constraint.kind == CONSTRAINT_NONE && (t->seen & (1u << F_CONSTRAINT)))
        return bad(d, "field 'constraint' without a type");
    if ((f->constraint.kind == CONSTRAINT_JSON_SCHEMA || f->constraint.kind == CONSTRAINT_REGEX) && !f->constraint.text)
        return bad(d, "constraint %s without a value", constraint_kind_name(f->constraint.kind));
    return true;
}

int frame_decode(const uint8_t *data, size_t len, frame_t *f, char **id_out, uint64_t *seq_out, char *err,
                 size_t errlen)
{
    dec_t d = {0};
    top_t t = {.f = f};
    frame_init(f, FRAME_ERROR);
    if (id_out) *id_out = NULL;
    if (seq_out) *seq_out = 0;
    bool ok;
    if (len > FRAME_MAX_BYTES) ok = bad(&d, "frame of %zu bytes exceeds the limit of %u", len, FRAME_MAX_BYTES);
    else {
        mpr_init(&d.r, data, len);
        if (mpr_peek(&d.r) != MPT_MAP && mpr_ok(&d.r)) ok = bad(&d, "a frame must be a msgpack map");
        else ok = read_map(&d, top_field, &t) && validate(&d, &t);
        if (ok && d.r.p != d.r.end) ok = bad(&d, "%zu trailing bytes after the frame", (size_t)(d.r.end - d.r.p));
    }
    free(t.type);
    if (ok) return 0;
    snprintf(err, errlen, "%s", d.msg);
    if (id_out && f->id) *id_out = xstrdup(f->id);
    if (seq_out) *seq_out = f->seq;
    frame_free(f);
    return -1;
}

int64_t frame_wire_length(const uint8_t *data, size_t len, char *err, size_t errlen)
{
    mpr_t r;
    mpr_init(&r, data, len < FRAME_MAX_BYTES ? len : FRAME_MAX_BYTES);
    if (mpr_skip(&r)) return (int64_t)(r.p - (const uint8_t *)data);
    if (r.status == MPR_SHORT && len < FRAME_MAX_BYTES) return 0;
    snprintf(err, errlen, "%s", r.status == MPR_SHORT ? "frame exceeds the size limit" : r.err);
    return -1;
}
