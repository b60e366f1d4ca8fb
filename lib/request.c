#include "request.h"
#include "chat.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ranges as the official conversion enforces them for chat requests, applied to raw
 * prompts too so both shapes accept the same values. */
#define MAX_TOKENS_LIMIT 393216
#define MAX_TOP_LOGPROBS 20

typedef struct {
    char *err;
    size_t errlen;
    const char *code;
} errbuf_t;

static int fail(errbuf_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(errbuf_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int read_id(const json_t *v, const char *field, frame_t *f, errbuf_t *e)
{
    char tmp[32];
    if (json_is_integer(v)) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
        f->id = xstrdup(tmp);
        return 0;
    }
    if (!json_is_string(v)) return fail(e, "\"%s\" must be a string", field);
    size_t n = json_string_length(v);
    if (n == 0 || n > 1024 || memchr(json_string_value(v), 0, n))
        return fail(e, "\"%s\" must be 1 to 1024 bytes without NUL", field);
    f->id = xstrdup(json_string_value(v));
    return 0;
}

static int read_number(const json_t *body, const char *name, double lo, double hi, bool lo_open, double *out,
                       errbuf_t *e)
{
    const json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(e, "\"%s\" must be a number", name);
    double x = json_number_value(v);
    if (!isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
        return fail(e, "\"%s\" is %g, the valid range is %s%g, %g]", name, x, lo_open ? "(" : "[", lo, hi);
    *out = x;
    return 0;
}

static int read_int(const json_t *body, const char *name, int64_t lo, int64_t hi, int64_t *out, errbuf_t *e)
{
    const json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return fail(e, "\"%s\" must be an integer", name);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return fail(e, "\"%s\" is %lld, the valid range is [%lld, %lld]", name, (long long)x,
                                      (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

/* Sampling fields this engine adds to the OpenAI set, for every shape. */
static int read_extensions(const json_t *body, frame_params_t *p, errbuf_t *e)
{
    if (read_int(body, "top_k", 0, INT32_MAX, &p->top_k, e) || read_number(body, "min_p", 0, 1, false, &p->min_p, e))
        return -1;
    const json_t *ids = json_object_get(body, "stop_token_ids");
    if (!ids || json_is_null(ids)) return 0;
    if (!json_is_array(ids) || json_array_size(ids) > 64)
        return fail(e, "\"stop_token_ids\" must be an array of at most 64 token ids");
    p->n_stop_ids = (uint32_t)json_array_size(ids);
    p->stop_ids = xcalloc(p->n_stop_ids ? p->n_stop_ids : 1, sizeof *p->stop_ids);
    for (size_t i = 0; i < p->n_stop_ids; i++) {
        const json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX)
            return fail(e, "\"stop_token_ids\"[%zu] is not a token id", i);
        p->stop_ids[i] = (uint32_t)json_integer_value(v);
    }
    return 0;
}

static void add_stop(frame_meta_t *m, const char *s, size_t n)
{
    m->stop = xrealloc(m->stop, (m->n_stop + 1) * sizeof *m->stop);
    m->stop[m->n_stop++] = xstrndup(s, n);
}

/* ---- raw prompts ------------------------------------------------------------------------ */

static int read_stop_strings(const json_t *body, frame_meta_t *m, errbuf_t *e)
{
    const json_t *stop = json_object_get(body, "stop");
    if (!stop || json_is_null(stop)) return 0;
    if (json_is_string(stop)) {
        add_stop(m, json_string_value(stop), json_string_length(stop));
        return 0;
    }
    if (!json_is_array(stop) || json_array_size(stop) > FRAME_MAX_STOPS)
        return fail(e, "\"stop\" must be a string or an array of at most %d strings", FRAME_MAX_STOPS);
    for (size_t i = 0; i < json_array_size(stop); i++) {
        const json_t *s = json_array_get(stop, i);
        if (!json_is_string(s) || !json_string_length(s) || memchr(json_string_value(s), 0, json_string_length(s)))
            return fail(e, "\"stop\"[%zu] must be a non-empty string without NUL", i);
        add_stop(m, json_string_value(s), json_string_length(s));
    }
    return 0;
}

static int read_response_format(const json_t *body, frame_t *f, errbuf_t *e)
{
    const json_t *rf = json_object_get(body, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type) return fail(e, "\"response_format\" must be an object with a \"type\"");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        f->constraint.kind = CONSTRAINT_JSON_OBJECT;
        f->meta.parse_json = true;
        return 0;
    }
    if (!strcmp(type, "json_schema")) {
        const json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (!schema) return fail(e, "\"response_format\" json_schema needs \"json_schema\": {\"schema\": ...}");
        f->constraint.kind = CONSTRAINT_JSON_SCHEMA;
        f->constraint.text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!f->constraint.text) return fail(e, "\"response_format\" schema cannot be serialised");
        return 0;
    }
    if (!strcmp(type, "regex")) {
        const json_t *re = json_object_get(rf, "regex");
        if (!json_is_string(re)) return fail(e, "\"response_format\" regex needs \"regex\": \"<pattern>\"");
        f->constraint.kind = CONSTRAINT_REGEX;
        f->constraint.text = xstrdup(json_string_value(re));
        return 0;
    }
    return fail(e, "\"response_format\" type \"%s\" is not one of text, json_object, json_schema, regex", type);
}

static int prompt_ids(const tokenizer_t *tok, const json_t *prompt, ids_t *out, errbuf_t *e)
{
    if (json_is_string(prompt)) {
        if (tokenizer_encode_with_added(tok, json_string_value(prompt), json_string_length(prompt), out) != 0)
            return fail(e, "\"prompt\" could not be tokenized");
        return 0;
    }
    if (!json_is_array(prompt)) return fail(e, "\"prompt\" must be a string or an array of token ids");
    uint32_t vocab = tokenizer_vocab_size(tok);
    for (size_t i = 0; i < json_array_size(prompt); i++) {
        const json_t *v = json_array_get(prompt, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
            return fail(e, "\"prompt\"[%zu] is not a token id below %u", i, vocab);
        ids_push(out, (uint32_t)json_integer_value(v));
    }
    return 0;
}

static int from_prompt(const tokenizer_t *tok, const json_t *body, frame_t *f, ids_t *ids, errbuf_t *e)
{
    frame_params_t *p = &f->params;
    bool logprobs = false;
    const json_t *lp = json_object_get(body, "logprobs");
    if (lp && !json_is_null(lp)) {
        /* Chat uses a boolean; the completions API an integer count of alternatives. */
        if (json_is_boolean(lp)) logprobs = json_is_true(lp);
        else if (json_is_integer(lp) && json_integer_value(lp) >= 0 && json_integer_value(lp) <= MAX_TOP_LOGPROBS) {
            logprobs = true;
            p->top_logprobs = json_integer_value(lp);
        } else
            return fail(e, "\"logprobs\" must be a boolean or an integer in [0, %d]", MAX_TOP_LOGPROBS);
    }
    p->logprobs = logprobs;
    int64_t n = 1;
    if (read_int(body, "max_tokens", 1, MAX_TOKENS_LIMIT, &p->max_tokens, e) ||
        read_number(body, "temperature", 0, 2, false, &p->temperature, e) ||
        read_number(body, "top_p", 0, 1, true, &p->top_p, e) ||
        read_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, &p->top_logprobs, e) ||
        read_int(body, "n", 1, 1, &n, e) || read_extensions(body, p, e) || read_stop_strings(body, &f->meta, e) ||
        read_response_format(body, f, e))
        return -1;
    const json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0) return fail(e, "\"seed\" must be a non-negative integer");
        p->has_seed = true;
        p->seed = (uint64_t)json_integer_value(seed);
    }
    const json_t *model = json_object_get(body, "model");
    if (json_is_string(model)) f->meta.model = xstrdup(json_string_value(model));
    return prompt_ids(tok, json_object_get(body, "prompt"), ids, e);
}

/* ---- chat bodies ------------------------------------------------------------------------ */

const char *request_template_model(const tokenizer_t *tok, const char *choice)
{
    static const char *v41 = "DeepSeek-V4.1-Flash", *v4 = "DeepSeek-V4-Pro";
    if (!strcmp(choice, "v41")) return v41;
    if (!strcmp(choice, "v4")) return v4;
    if (strcmp(choice, "auto")) return NULL;
    static const char system[] = "<\xef\xbd\x9cSystem\xef\xbd\x9c>";
    return tokenizer_added_id(tok, system, sizeof system - 1) >= 0 ? v41 : v4;
}

static int from_chat(const tokenizer_t *tok, const request_limits_t *limits, const json_t *body, frame_t *f,
                     ids_t *ids, errbuf_t *e)
{
    /* The deployment's template, whatever the body names; the caller's name is kept. */
    const json_t *asked = json_object_get(body, "model");
    if (asked && !json_is_string(asked)) return fail(e, "\"model\" must be a string");
    if (asked) f->meta.model = xstrdup(json_string_value(asked));
    json_t *named = json_copy((json_t *)body);
    json_object_set_new(named, "model", json_string(limits->template_model));
    body = named;
    chat_prompt_t cp = {0};
    int rc = chat_render(body, &cp, e->err, e->errlen);
    if (rc == 0) rc = chat_encode(tok, &cp, ids, e->err, e->errlen);
    int64_t max_tokens = -1;
    if (rc == 0 && ids->n <= limits->max_prompt_tokens &&
        chat_resolve_max_tokens(&cp, ids->n, limits->context_length, &max_tokens, e->err, e->errlen) != 0) {
        e->code = "context_length";
        rc = -1;
    }
    if (rc == 0) rc = read_extensions(body, &f->params, e);
    if (rc == 0) {
        frame_params_t *p = &f->params;
        p->max_tokens = max_tokens;
        p->temperature = cp.temperature;
        p->top_p = cp.top_p;
        p->has_seed = cp.has_seed;
        p->seed = cp.seed;
        p->logprobs = cp.logprobs;
        p->top_logprobs = cp.top_logprobs > 0 ? cp.top_logprobs : 0;
        frame_meta_t *m = &f->meta;
        m->thinking = cp.stage == CHAT_STAGE_REASONING_START || cp.stage == CHAT_STAGE_REASONING_CONTINUATION;
        m->continuation = cp.stage == CHAT_STAGE_REASONING_CONTINUATION || cp.stage == CHAT_STAGE_CONTENT_CONTINUATION;
        m->tools = cp.tools;
        m->in_tool_calls = cp.starts_in_tool_calls;
        m->parse_json = cp.parse_json_output;
        if (cp.n_stop > FRAME_MAX_STOPS) rc = fail(e, "at most %d stop strings", FRAME_MAX_STOPS);
        for (size_t i = 0; rc == 0 && i < cp.n_stop; i++) add_stop(m, (const char *)cp.stop[i].data, cp.stop[i].len);
        if (cp.constraint == CHAT_CONSTRAINT_JSON) {
            f->constraint.kind = cp.constraint_text.len ? CONSTRAINT_JSON_SCHEMA : CONSTRAINT_JSON_OBJECT;
            if (cp.constraint_text.len) f->constraint.text = xstrdup(buf_cstr(&cp.constraint_text));
        } else if (cp.constraint == CHAT_CONSTRAINT_REGEX) {
            f->constraint.kind = CONSTRAINT_REGEX;
            f->constraint.text = xstrdup(buf_cstr(&cp.constraint_text));
        }
    }
    chat_prompt_free(&cp);
    json_decref(named);
    return rc;
}

/* ---- the line --------------------------------------------------------------------------- */

static int from_object(const tokenizer_t *tok, const request_limits_t *limits, const json_t *root, frame_t *f,
                       ids_t *ids, errbuf_t *e)
{
    const json_t *custom_id = json_object_get(root, "custom_id");
    if (custom_id || json_object_get(root, "body")) {
        f->meta.shape = SHAPE_BATCH;
        if (!custom_id) return fail(e, "batch line without \"custom_id\"");
        if (read_id(custom_id, "custom_id", f, e)) return -1;
        f->meta.custom_id = xstrdup(f->id);
        const json_t *method = json_object_get(root, "method");
        if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST")))
            return fail(e, "batch \"method\" must be \"POST\"");
        const char *url = json_string_value(json_object_get(root, "url"));
        const json_t *body = json_object_get(root, "body");
        if (!json_is_object(body)) return fail(e, "batch line without an object \"body\"");
        if (url && !strcmp(url, "/v1/chat/completions")) return from_chat(tok, limits, body, f, ids, e);
        if (url && !strcmp(url, "/v1/completions")) return from_prompt(tok, body, f, ids, e);
        return fail(e, "batch \"url\" must be \"/v1/chat/completions\" or \"/v1/completions\"");
    }
    const json_t *id = json_object_get(root, "id");
    if (id && !json_is_null(id)) {
        if (read_id(id, "id", f, e)) return -1;
    } else {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "req-%llu", (unsigned long long)f->seq);
        f->id = xstrdup(tmp);
    }
    if (json_object_get(root, "messages")) {
        f->meta.shape = SHAPE_CHAT;
        return from_chat(tok, limits, root, f, ids, e);
    }
    if (json_object_get(root, "prompt")) {
        f->meta.shape = SHAPE_PROMPT;
        return from_prompt(tok, root, f, ids, e);
    }
    return fail(e, "a request needs \"prompt\" (text), \"messages\" (chat) or \"custom_id\"+\"body\" (batch)");
}

int request_from_line(const tokenizer_t *tok, const request_limits_t *limits, const char *line, size_t len,
                      uint64_t seq, frame_t *f, char *err, size_t errlen, const char **code)
{
    errbuf_t e = {err, errlen, "bad_request"};
    *code = e.code;
    frame_init(f, FRAME_REQUEST);
    f->seq = seq;
    f->has_meta = true;
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) return fail(&e, "invalid JSON at column %d: %s", je.column, je.text);
    ids_t ids = {0};
    int rc = json_is_object(root) ? from_object(tok, limits, root, f, &ids, &e)
                                  : fail(&e, "a request line must be a JSON object");
    json_decref(root);
    if (rc == 0 && ids.n == 0) rc = fail(&e, "the prompt is empty");
    if (rc == 0 && ids.n > limits->max_prompt_tokens) {
        e.code = "context_length";
        rc = fail(&e, "the prompt has %zu tokens, more than the limit of %zu", ids.n, limits->max_prompt_tokens);
    }
    if (rc == 0) {
        f->tokens = ids.v;
        f->n_tokens = (uint32_t)ids.n;
        f->meta.prompt_tokens = ids.n;
    } else
        ids_free(&ids);
    *code = e.code;
    return rc;
}
