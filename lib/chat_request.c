/* Chat Completions request body -> conversation + inference/parsing options, rejecting the
 * requests recipe's conversion rejects, then the prompt (chat_render.c). The messages and the
 * tools are read in chat_messages.c and chat_tools.c. */
#include "chat_conv.h"
#include "chat_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS_UPPER 393216 /* recipe's default upper bound, thinking or not */
#define MAX_STOP 16

/* json_object needs the word "json" (any case) somewhere in the messages, as OpenAI asks. */
static bool mentions_json(const chat_conv_t *conv) {
    for (size_t i = 0; i < conv->n_msgs; i++) {
        const buf_t *b = &conv->msgs[i].content;
        for (size_t k = 0; k + 4 <= b->len; k++)
            if (!strncasecmp((const char *)b->data + k, "json", 4)) return true;
    }
    return false;
}

/* ---- sampling and the rest --------------------------------------------------------------- */

/* Reads the sampling fields; top_p is resolved later, it depends on the tools. */
static int sampling(chat_ctx_t *c, const json_t *body, chat_prompt_t *p, double *top_p, bool *has_top_p) {
    double t = 1, tp = 1, pen;
    int has_t = chat_opt_f32(c, body, "temperature", &t), has_tp = chat_opt_f32(c, body, "top_p", &tp);
    if (has_t < 0 || has_tp < 0) return -1;
    if (has_t && !(t >= 0 && t <= 2)) return chat_fail(c, "invalid temperature value, the valid range of temperature is [0, 2]");
    if (has_tp && !(tp > 0 && tp <= 1)) return chat_fail(c, "invalid top_p value, the valid range of top_p is (0, 1.0]");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < 2; i++) {
        int has = chat_opt_f32(c, body, penalties[i], &pen);
        if (has < 0) return -1;
        if (has && !(pen >= -2 && pen <= 2)) return chat_fail(c, "invalid %s value, the valid range of %s is [-2, 2]", penalties[i], penalties[i]);
    }
    p->temperature = p->thinking ? 1 : t; /* thinking mode samples at temperature 1 */
    *top_p = tp;
    *has_top_p = has_tp;

    uint64_t u;
    int has = chat_opt_uint(c, body, "max_tokens", UINT32_MAX, &u);
    if (has < 0) return -1;
    if (has && (u < 1 || u > MAX_TOKENS_UPPER))
        return chat_fail(c, "invalid max_tokens value, the valid range of max_tokens is [1, %d]", MAX_TOKENS_UPPER);
    p->max_tokens = has ? (int64_t)u : -1;
    if ((has = chat_opt_uint(c, body, "seed", UINT64_MAX, &p->seed)) < 0) return -1;
    if (has && p->seed >> 63) return chat_fail(c, "invalid seed value, the valid range of seed is [0, 2^63)");
    p->has_seed = has;
    if ((has = chat_opt_uint(c, body, "n", UINT8_MAX, &u)) < 0) return -1;
    if (has && u != 1) return chat_fail(c, "invalid n value (only n = 1 is supported)");
    if (chat_opt_bool(c, body, "logprobs", "logprobs", &p->logprobs)) return -1;
    if ((has = chat_opt_uint(c, body, "top_logprobs", UINT8_MAX, &u)) < 0) return -1;
    if (has && u > 20) return chat_fail(c, "invalid top_logprobs value, the valid range of top_logprobs is [0, 20]");
    if (has && !p->logprobs) return chat_fail(c, "logprobs must be set to true if top_logprobs is used");
    p->top_logprobs = has ? (int)u : -1;
    return 0;
}

static int stop_sequences(chat_ctx_t *c, const json_t *v, chat_prompt_t *p) {
    if (!v) return 0;
    if (!json_is_string(v) && !json_is_array(v)) return chat_fail(c, "'stop': expected a string or a list");
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (n > MAX_STOP) return chat_fail(c, "'stop': at most %d sequences, got %zu", MAX_STOP, n);
    p->stop = xcalloc(n ? n : 1, sizeof *p->stop);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (chat_want_string(c, s, "'stop'")) return -1;
        if (!json_string_length(s)) return chat_fail(c, "'stop': empty string");
        chat_set_buf(&p->stop[p->n_stop++], s);
    }
    return 0;
}

static int stream_fields(chat_ctx_t *c, const json_t *body, chat_prompt_t *p) {
    if (chat_opt_bool(c, body, "stream", "stream", &p->stream)) return -1;
    const json_t *opts = chat_field(body, "stream_options");
    if (!opts) return 0;
    bool usage;
    if (!json_is_object(opts)) return chat_fail(c, "stream_options: expected an object");
    if (chat_opt_bool(c, opts, "include_usage", "stream_options.include_usage", &usage)) return -1;
    if (!p->stream) return chat_fail(c, "stream_options should be set along with stream = true");
    return 0;
}

static int parallel_tool_calls(chat_ctx_t *c, const json_t *body) {
    bool b;
    return chat_opt_bool(c, body, "parallel_tool_calls", "parallel_tool_calls", &b);
}

/* thinking: {"type": enabled|adaptive|disabled}; reasoning_effort "none" alone turns it off. */
static int thinking_mode(chat_ctx_t *c, const json_t *body, chat_conv_t *conv) {
    static const char *const types[] = {"enabled", "adaptive", "disabled"};
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"};
    static const chat_effort_t effort_of[] = {CHAT_EFFORT_HIGH, CHAT_EFFORT_LOW, CHAT_EFFORT_LOW, CHAT_EFFORT_HIGH,
                                              CHAT_EFFORT_HIGH, CHAT_EFFORT_XHIGH, CHAT_EFFORT_MAX, CHAT_EFFORT_MAX};
    const json_t *th = chat_field(body, "thinking"), *re = chat_field(body, "reasoning_effort");
    int type = -1, effort = -1;
    if (th) {
        if (!json_is_object(th)) return chat_fail(c, "'thinking': expected an object");
        const json_t *t = json_object_get(th, "type");
        if (!t) return chat_fail(c, "'thinking': missing 'type'");
        if ((type = chat_enum_value(c, t, "thinking.type", types, DI_ARRAY_LEN(types), true)) < 0) return -1;
        uint64_t budget;
        if (chat_opt_uint(c, th, "budget_tokens", UINT64_MAX, &budget) < 0) return -1;
    }
    if (re && (effort = chat_enum_value(c, re, "reasoning_effort", efforts, DI_ARRAY_LEN(efforts), true)) < 0) return -1;
    conv->thinking = type >= 0 ? type != 2 : effort != 0;
    conv->effort = !conv->thinking ? CHAT_EFFORT_UNSET : effort >= 0 ? effort_of[effort] : CHAT_EFFORT_HIGH;
    return 0;
}

static int model_version(chat_ctx_t *c, const json_t *model, chat_conv_t *conv) {
    if (!model) return chat_fail(c, "missing 'model'");
    if (!json_is_string(model)) return chat_fail(c, "'model': expected a string, got %s", chat_type_name(model));
    const char *m = json_string_value(model);
    if (!strcmp(m, "DeepSeek-V4.1-Flash")) conv->model = CHAT_MODEL_V41;
    else if (!strcmp(m, "DeepSeek-V4-Pro")) conv->model = CHAT_MODEL_V4;
    else return chat_fail(c, "the supported model names are DeepSeek-V4-Pro, DeepSeek-V4.1-Flash, but you passed %s", m);
    return 0;
}

/* The option checks that look at messages, tools and format together. */
static int cross_checks(chat_ctx_t *c, const chat_conv_t *conv, size_t requested_tools, bool has_format) {
    const chat_msg_t *last = &conv->msgs[conv->n_msgs - 1];
    bool prefix = last->role == CHAT_ASSISTANT && last->prefix, calls = false;
    for (size_t i = 0; i < conv->n_msgs; i++) calls |= conv->msgs[i].n_calls > 0;
    if (conv->format == CHAT_FORMAT_JSON_OBJECT && !mentions_json(conv))
        return chat_fail(c, "prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'");
    if (prefix && conv->format == CHAT_FORMAT_JSON_OBJECT) return chat_fail(c, "response_format json_object should not be used with prefix");
    if (prefix && (requested_tools || calls)) return chat_fail(c, "function calls should not be used with prefix");
    if (has_format && conv->n_tools && conv->tools[0].strict == 1)
        return chat_fail(c, "response_format should not be used with strict tools");
    return 0;
}

/* top_p in thinking mode: V4.1 raises a requested one to at least 0.95, V4 samples tool
 * turns at 0.95 and others at 1. Outside thinking mode V4.1 ignores it, V4 keeps it. */
static double resolve_top_p(const chat_conv_t *conv, double top_p, bool has_top_p) {
    const double floor = (double)0.95f; /* recipe computes in float32 */
    if (conv->model == CHAT_MODEL_V41) return conv->thinking && has_top_p ? fmax(top_p, floor) : 1;
    if (conv->thinking) return conv->n_tools ? floor : 1;
    return top_p;
}

static void output_options(chat_conv_t *conv, chat_prompt_t *p, double top_p, bool has_top_p) {
    const chat_msg_t *last = conv->n_msgs ? &conv->msgs[conv->n_msgs - 1] : NULL;
    p->top_p = resolve_top_p(conv, top_p, has_top_p);
    p->thinking = conv->thinking;
    p->stage = CHAT_STAGE_NONE;
    if (conv->thinking) {
        p->stage = CHAT_STAGE_REASONING_START;
        if (last && last->role == CHAT_ASSISTANT && last->prefix)
            p->stage = last->content.len ? CHAT_STAGE_CONTENT_CONTINUATION
                     : last->reasoning.len ? CHAT_STAGE_REASONING_CONTINUATION : CHAT_STAGE_REASONING_START;
    }
    p->max_effort = conv->thinking && conv->effort == CHAT_EFFORT_MAX;
    p->tools = conv->n_tools > 0;
    p->starts_in_tool_calls = p->tools && conv->choice == CHAT_CHOICE_REQUIRED;
    if (!p->tools) return;
    /* Tools take the output constraint over any response format. */
    p->constraint = p->starts_in_tool_calls ? CHAT_CONSTRAINT_TOOL_CALL_REQUIRED : CHAT_CONSTRAINT_TOOL_CALL;
    buf_clear(&p->constraint_text);
    json_t *list = json_array();
    for (size_t i = 0; i < conv->n_tools; i++) {
        const chat_tool_t *t = &conv->tools[i];
        json_t *fn = json_object();
        json_object_set_new(fn, "name", chat_json_buf(&t->name));
        json_object_set_new(fn, "description", t->has_description ? chat_json_buf(&t->description) : json_null());
        json_object_set(fn, "parameters", t->parameters);
        json_object_set_new(fn, "strict", t->strict < 0 ? json_null() : json_boolean(t->strict));
        json_array_append_new(list, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    chat_json_write(&p->constraint_text, list, CHAT_JSON_COMPACT);
    json_decref(list);
}


/* recipe drops empty system messages. */
static void drop_empty_systems(chat_conv_t *conv) {
    size_t n = 0;
    for (size_t i = 0; i < conv->n_msgs; i++) {
        chat_msg_t *m = &conv->msgs[i];
        if (m->role == CHAT_SYSTEM && !m->content.len) buf_free(&m->content);
        else conv->msgs[n++] = *m;
    }
    conv->n_msgs = n;
}

static int convert(chat_ctx_t *c, const json_t *body, chat_conv_t *conv, chat_prompt_t *p) {
    if (!json_is_object(body)) return chat_fail(c, "request body must be a JSON object");
    if (model_version(c, json_object_get(body, "model"), conv)) return -1;
    p->model = conv->model;
    if (thinking_mode(c, body, conv)) return -1;
    p->thinking = conv->thinking;
    if (chat_read_messages(c, json_object_get(body, "messages"), conv)) return -1;
    if (chat_read_tools(c, chat_field(body, "tools"), conv)) return -1;
    size_t requested_tools = conv->n_tools;
    buf_t named = {0};
    bool is_named = false;
    int rc = chat_read_tool_choice(c, chat_field(body, "tool_choice"), conv, &named, &is_named);
    if (!rc) rc = chat_resolve_tools(c, conv, &named, is_named);
    buf_free(&named);
    if (rc) return -1;
    if (chat_read_response_format(c, chat_field(body, "response_format"), conv, p)) return -1;
    double top_p = 1;
    bool has_top_p = false;
    if (sampling(c, body, p, &top_p, &has_top_p) || stop_sequences(c, chat_field(body, "stop"), p) || stream_fields(c, body, p) ||
        parallel_tool_calls(c, body))
        return -1;
    if (cross_checks(c, conv, requested_tools, chat_field(body, "response_format") != NULL)) return -1;
    if (conv->n_tools && conv->thinking && conv->choice == CHAT_CHOICE_REQUIRED)
        return chat_fail(c, "thinking mode does not support this tool_choice");
    if (!conv->n_tools && conv->choice == CHAT_CHOICE_REQUIRED) conv->choice = CHAT_CHOICE_AUTO;
    drop_empty_systems(conv);
    output_options(conv, p, top_p, has_top_p);
    return 0;
}

int chat_render(const json_t *body, chat_prompt_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->max_tokens = -1;
    out->top_logprobs = -1;
    chat_conv_t conv = {0};
    chat_ctx_t c = {err, errlen};
    int rc = convert(&c, body, &conv, out);
    if (!rc) chat_render_conv(&conv, out);
    chat_conv_free(&conv);
    return rc;
}

void chat_conv_free(chat_conv_t *conv) {
    for (size_t i = 0; i < conv->n_msgs; i++) {
        chat_msg_t *m = &conv->msgs[i];
        buf_free(&m->content);
        buf_free(&m->reasoning);
        buf_free(&m->call_id);
        for (size_t k = 0; k < m->n_calls; k++) {
            buf_free(&m->calls[k].id);
            buf_free(&m->calls[k].name);
            buf_free(&m->calls[k].arguments);
        }
        free(m->calls);
    }
    free(conv->msgs);
    chat_drop_tools(conv);
    free(conv->tools);
    json_decref(conv->schema);
    memset(conv, 0, sizeof *conv);
}

void chat_prompt_free(chat_prompt_t *p) {
    buf_free(&p->text);
    free(p->special);
    for (size_t i = 0; i < p->n_stop; i++) buf_free(&p->stop[i]);
    free(p->stop);
    buf_free(&p->constraint_text);
    memset(p, 0, sizeof *p);
}

int chat_resolve_max_tokens(const chat_prompt_t *p, size_t prompt_tokens, size_t context_limit, int64_t *out,
                            char *err, size_t errlen) {
    if (p->max_tokens >= 0) {
        if (prompt_tokens + (size_t)p->max_tokens > context_limit) {
            snprintf(err, errlen,
                     "this model's maximum context length is %zu tokens, but %zu were requested (%zu in the messages, "
                     "%lld in the completion); reduce the length of the messages or completion",
                     context_limit, prompt_tokens + (size_t)p->max_tokens, prompt_tokens, (long long)p->max_tokens);
            return -1;
        }
        *out = p->max_tokens;
        return 0;
    }
    if (prompt_tokens > context_limit) {
        snprintf(err, errlen,
                 "this model's maximum context length is %zu tokens, but the messages take %zu; reduce their length",
                 context_limit, prompt_tokens);
        return -1;
    }
    int64_t want = !p->thinking ? 8192 : p->max_effort ? 131072 : 65536;
    int64_t left = (int64_t)(context_limit - prompt_tokens);
    *out = want < left ? want : left > 1 ? left : 1;
    return 0;
}
