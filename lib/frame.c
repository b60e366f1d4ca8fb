/* Frame life cycle and msgpack encoding. Decoding is in frame_decode.c. */
#include "frame.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

const char *frame_type_name(frame_type_t t)
{
    switch (t) {
    case FRAME_REQUEST: return "request";
    case FRAME_STATE: return "state";
    case FRAME_TOKENS: return "tokens";
    case FRAME_DONE: return "done";
    case FRAME_ERROR: return "error";
    case FRAME_EOS: return "eos";
    }
    return "?";
}

const char *constraint_kind_name(constraint_kind_t k)
{
    switch (k) {
    case CONSTRAINT_NONE: return "none";
    case CONSTRAINT_JSON_OBJECT: return "json_object";
    case CONSTRAINT_JSON_SCHEMA: return "json_schema";
    case CONSTRAINT_REGEX: return "regex";
    }
    return "?";
}

const char *request_shape_name(request_shape_t s)
{
    switch (s) {
    case SHAPE_PROMPT: return "prompt";
    case SHAPE_CHAT: return "chat";
    case SHAPE_BATCH: return "batch";
    }
    return "?";
}

void frame_params_init(frame_params_t *p)
{
    *p = (frame_params_t){.max_tokens = -1, .temperature = -1, .top_p = -1, .min_p = -1, .top_k = -1};
}

void frame_init(frame_t *f, frame_type_t type)
{
    *f = (frame_t){.type = type};
    frame_params_init(&f->params);
}

static void free_strings(char **v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

void frame_meta_free(frame_meta_t *m)
{
    free(m->custom_id);
    free(m->model);
    free_strings(m->stop, m->n_stop);
    *m = (frame_meta_t){0};
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

void frame_meta_copy(frame_meta_t *dst, const frame_meta_t *src)
{
    *dst = *src;
    dst->custom_id = dup_or_null(src->custom_id);
    dst->model = dup_or_null(src->model);
    dst->stop = src->n_stop ? xmalloc(src->n_stop * sizeof *dst->stop) : NULL;
    for (uint32_t i = 0; i < src->n_stop; i++) dst->stop[i] = xstrdup(src->stop[i]);
}

void frame_free(frame_t *f)
{
    free(f->id);
    for (uint32_t i = 0; i < f->n_hops; i++) free(f->hops[i].stage);
    free(f->hops);
    free(f->tokens);
    free(f->params.stop_ids);
    free(f->constraint.text);
    frame_meta_free(&f->meta);
    free(f->logprobs);
    free(f->state);
    free(f->finish_reason);
    free(f->stage);
    free(f->code);
    free(f->message);
    free(f->eos.sender);
    free(f->eos.origin);
    free_strings(f->eos.ids, f->eos.n_ids);
    frame_init(f, f->type);
}

void frame_add_hop(frame_t *f, const char *stage, uint64_t in_us, uint64_t out_us)
{
    if (f->n_hops == FRAME_MAX_HOPS) {
        /* Keep the trace bounded: the oldest hop gives way. */
        free(f->hops[0].stage);
        memmove(f->hops, f->hops + 1, (FRAME_MAX_HOPS - 1) * sizeof *f->hops);
        f->n_hops--;
    }
    f->hops = xrealloc(f->hops, (f->n_hops + 1) * sizeof *f->hops);
    f->hops[f->n_hops++] = (frame_hop_t){xstrdup(stage), in_us, out_us};
}

void frame_make_error(frame_t *f, const char *id, uint64_t seq, const char *stage, const char *code,
                      const char *message)
{
    frame_init(f, FRAME_ERROR);
    f->id = dup_or_null(id);
    f->seq = seq;
    f->stage = xstrdup(stage);
    f->code = xstrdup(code);
    f->message = xstrdup(message);
}

/* ---- encoding ----------------------------------------------------------------------- */

static int write_to_buf(void *data, const char *p, size_t n)
{
    buf_append(data, p, n);
    return 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_key_str(msgpack_packer *pk, const char *key, const char *value)
{
    pack_str(pk, key);
    pack_str(pk, value);
}

static void pack_key_u64(msgpack_packer *pk, const char *key, uint64_t value)
{
    pack_str(pk, key);
    msgpack_pack_uint64(pk, value);
}

static void pack_ids(msgpack_packer *pk, const uint32_t *ids, uint32_t n)
{
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++) msgpack_pack_uint32(pk, ids[i]);
}

static void pack_params(msgpack_packer *pk, const frame_params_t *p)
{
    int n = (p->max_tokens >= 0) + (p->temperature >= 0) + (p->top_p >= 0) + (p->min_p >= 0) +
            (p->top_k >= 0) + p->has_seed + p->logprobs + (p->top_logprobs > 0) + (p->n_stop_ids > 0);
    msgpack_pack_map(pk, (size_t)n);
    if (p->max_tokens >= 0) pack_key_u64(pk, "max_tokens", (uint64_t)p->max_tokens);
    if (p->temperature >= 0) { pack_str(pk, "temperature"); msgpack_pack_double(pk, p->temperature); }
    if (p->top_p >= 0) { pack_str(pk, "top_p"); msgpack_pack_double(pk, p->top_p); }
    if (p->min_p >= 0) { pack_str(pk, "min_p"); msgpack_pack_double(pk, p->min_p); }
    if (p->top_k >= 0) pack_key_u64(pk, "top_k", (uint64_t)p->top_k);
    if (p->has_seed) pack_key_u64(pk, "seed", p->seed);
    if (p->logprobs) { pack_str(pk, "logprobs"); msgpack_pack_true(pk); }
    if (p->top_logprobs > 0) pack_key_u64(pk, "top_logprobs", (uint64_t)p->top_logprobs);
    if (p->n_stop_ids) { pack_str(pk, "stop_token_ids"); pack_ids(pk, p->stop_ids, p->n_stop_ids); }
}

static void pack_bool(msgpack_packer *pk, const char *key, bool v)
{
    pack_str(pk, key);
    if (v) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
}

static void pack_meta(msgpack_packer *pk, const frame_meta_t *m)
{
    msgpack_pack_map(pk, 5 + m->continuation + m->in_tool_calls + (m->custom_id != NULL) + (m->model != NULL) + (m->n_stop > 0));
    pack_key_str(pk, "shape", request_shape_name(m->shape));
    if (m->custom_id) pack_key_str(pk, "custom_id", m->custom_id);
    if (m->model) pack_key_str(pk, "model", m->model);
    pack_bool(pk, "thinking", m->thinking);
    pack_bool(pk, "tools", m->tools);
    if (m->continuation) pack_bool(pk, "continuation", true);
    if (m->in_tool_calls) pack_bool(pk, "in_tool_calls", true);
    pack_bool(pk, "json", m->parse_json);
    if (m->n_stop) {
        pack_str(pk, "stop");
        msgpack_pack_array(pk, m->n_stop);
        for (uint32_t i = 0; i < m->n_stop; i++) pack_str(pk, m->stop[i]);
    }
    pack_key_u64(pk, "prompt_tokens", m->prompt_tokens);
}

static void pack_logprobs(msgpack_packer *pk, const frame_logprob_t *lp, uint32_t n)
{
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++) {
        msgpack_pack_array(pk, 2);
        msgpack_pack_float(pk, lp[i].logprob);
        msgpack_pack_array(pk, lp[i].n_top);
        for (uint32_t k = 0; k < lp[i].n_top; k++) {
            msgpack_pack_array(pk, 2);
            msgpack_pack_uint32(pk, lp[i].top_ids[k]);
            msgpack_pack_float(pk, lp[i].top_logprobs[k]);
        }
    }
}

static void pack_trace(msgpack_packer *pk, const frame_t *f)
{
    pack_str(pk, "trace");
    msgpack_pack_array(pk, f->n_hops);
    for (uint32_t i = 0; i < f->n_hops; i++) {
        msgpack_pack_array(pk, 3);
        pack_str(pk, f->hops[i].stage);
        msgpack_pack_uint64(pk, f->hops[i].in_us);
        msgpack_pack_uint64(pk, f->hops[i].out_us);
    }
}

/* Number of map entries each type writes besides v, type, trace. */
static size_t body_fields(const frame_t *f)
{
    switch (f->type) {
    case FRAME_REQUEST: return 5 + (f->constraint.kind != CONSTRAINT_NONE);
    case FRAME_STATE: return 6 + (f->constraint.kind != CONSTRAINT_NONE) + (f->logprobs != NULL);
    case FRAME_TOKENS: return 3 + (f->logprobs != NULL) + f->has_meta;
    case FRAME_DONE: return 4 + f->has_meta;
    case FRAME_ERROR: return 5 + f->has_meta;
    case FRAME_EOS: return 4 + (f->eos.n_ids > 0);
    }
    return 0;
}

void frame_encode(const frame_t *f, buf_t *out)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, write_to_buf);
    msgpack_pack_map(&pk, 3 + body_fields(f));
    pack_key_u64(&pk, "v", FRAME_VERSION);
    pack_key_str(&pk, "type", frame_type_name(f->type));
    pack_trace(&pk, f);
    if (f->type != FRAME_EOS) {
        pack_str(&pk, "id");
        if (f->id) pack_str(&pk, f->id);
        else msgpack_pack_nil(&pk);
        pack_key_u64(&pk, "seq", f->seq);
    }
    switch (f->type) {
    case FRAME_REQUEST:
    case FRAME_STATE:
        pack_str(&pk, f->type == FRAME_REQUEST ? "prompt" : "tokens");
        pack_ids(&pk, f->tokens, f->n_tokens);
        if (f->type == FRAME_STATE) {
            if (f->logprobs) {
                pack_str(&pk, "logprobs");
                pack_logprobs(&pk, f->logprobs, f->n_tokens);
            }
            pack_str(&pk, "state");
            msgpack_pack_bin(&pk, f->state_len);
            msgpack_pack_bin_body(&pk, f->state, f->state_len);
        }
        pack_str(&pk, "params");
        pack_params(&pk, &f->params);
        if (f->constraint.kind != CONSTRAINT_NONE) {
            pack_str(&pk, "constraint");
            msgpack_pack_map(&pk, 1 + (f->constraint.text != NULL) + f->constraint.has_hash);
            pack_key_str(&pk, "type", constraint_kind_name(f->constraint.kind));
            if (f->constraint.text) pack_key_str(&pk, "value", f->constraint.text);
            if (f->constraint.has_hash) pack_key_u64(&pk, "hash", f->constraint.hash);
        }
        pack_str(&pk, "meta");
        pack_meta(&pk, &f->meta);
        break;
    case FRAME_TOKENS:
        pack_str(&pk, "tokens");
        pack_ids(&pk, f->tokens, f->n_tokens);
        if (f->logprobs) {
            pack_str(&pk, "logprobs");
            pack_logprobs(&pk, f->logprobs, f->n_tokens);
        }
        break;
    case FRAME_DONE:
        pack_key_str(&pk, "finish_reason", f->finish_reason ? f->finish_reason : "stop");
        pack_str(&pk, "usage");
        msgpack_pack_map(&pk, 2);
        pack_key_u64(&pk, "prompt_tokens", f->prompt_tokens);
        pack_key_u64(&pk, "completion_tokens", f->completion_tokens);
        break;
    case FRAME_ERROR:
        pack_key_str(&pk, "stage", f->stage ? f->stage : "?");
        pack_key_str(&pk, "code", f->code ? f->code : "error");
        pack_key_str(&pk, "message", f->message ? f->message : "");
        break;
    case FRAME_EOS:
        pack_key_str(&pk, "sender", f->eos.sender ? f->eos.sender : "");
        pack_key_str(&pk, "origin", f->eos.origin ? f->eos.origin : "");
        pack_key_u64(&pk, "announced", f->eos.announced);
        pack_key_u64(&pk, "served", f->eos.served);
        if (f->eos.n_ids) {
            pack_str(&pk, "ids");
            msgpack_pack_array(&pk, (uint32_t)f->eos.n_ids);
            for (uint64_t i = 0; i < f->eos.n_ids; i++) pack_str(&pk, f->eos.ids[i]);
        }
        break;
    }
    if (f->has_meta && f->type != FRAME_REQUEST && f->type != FRAME_STATE && f->type != FRAME_EOS) {
        pack_str(&pk, "meta");
        pack_meta(&pk, &f->meta);
    }
}
