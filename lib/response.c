#include "response.h"

#include "outparse.h"
#include "textstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct response {
    char *id;
    request_shape_t shape;
    char *custom_id;
    char *model;
    bool thinking;
    textstream_t ts;
    outparse_t out;
    buf_t text;            /* decoded text of the latest ids */
    /* What delta lines have carried so far. */
    size_t sent_content, sent_reasoning, sent_calls;
    size_t *sent_args;     /* per tool call */
};

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

response_t *response_new(const tokenizer_t *tok, const char *id, const frame_meta_t *meta)
{
    static const frame_meta_t plain = {.shape = SHAPE_PROMPT};
    if (!meta) meta = &plain;
    response_t *r = xcalloc(1, sizeof *r);
    r->id = xstrdup(id ? id : "");
    r->shape = meta->shape;
    r->custom_id = dup_or_null(meta->custom_id);
    r->model = dup_or_null(meta->model);
    r->thinking = meta->shape != SHAPE_PROMPT && meta->thinking;
    textstream_init(&r->ts, tok);
    outparse_opts_t opts = {
        .plain = meta->shape == SHAPE_PROMPT,
        .thinking = meta->thinking,
        .continuation = meta->continuation,
        .tools = meta->tools,
        .in_tool_calls = meta->in_tool_calls,
        .json = meta->parse_json,
        .stop = meta->stop,
        .n_stop = meta->n_stop,
    };
    outparse_init(&r->out, &opts);
    return r;
}

void response_free(response_t *r)
{
    if (!r) return;
    free(r->id);
    free(r->custom_id);
    free(r->model);
    outparse_free(&r->out);
    buf_free(&r->text);
    free(r->sent_args);
    free(r);
}

/* The JSON string of b's bytes from `from` on (always valid UTF-8 here). */
static json_t *json_buf(const buf_t *b, size_t from)
{
    return b->len > from ? json_stringn((const char *)b->data + from, b->len - from) : json_string("");
}

/* Tool call ids look like OpenAI's ("call_00_" and 24 letters or digits); they are derived
 * from the request id and the call's index, so the same answer always gets the same ids. */
static void call_id(const response_t *r, size_t index, char out[40])
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the id, then splitmix64 steps */
    for (const char *s = r->id; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    h ^= index * 0x9e3779b97f4a7c15ull;
    int n = snprintf(out, 40, "call_%02zu_", index % 100);
    for (int i = 0; i < 24; i++) {
        h += 0x9e3779b97f4a7c15ull;
        uint64_t z = h;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        out[n + i] = alphabet[z % (sizeof alphabet - 1)];
    }
    out[n + 24] = 0;
}

static json_t *tool_call_json(const response_t *r, size_t i, bool with_index)
{
    char id[40];
    call_id(r, i, id);
    const outparse_call_t *c = &r->out.calls[i];
    json_t *call = json_object();
    if (with_index) json_object_set_new(call, "index", json_integer((json_int_t)i));
    json_object_set_new(call, "id", json_string(id));
    json_object_set_new(call, "type", json_string("function"));
    json_object_set_new(call, "function",
                        json_pack("{s:o, s:o}", "name", json_string(c->name), "arguments", json_buf(&c->args, 0)));
    return call;
}

/* A delta line for everything the parser released since the last one, or NULL. */
static json_t *take_delta(response_t *r)
{
    const outparse_t *o = &r->out;
    json_t *d = json_object();
    if (o->reasoning.len > r->sent_reasoning)
        json_object_set_new(d, "reasoning_content", json_buf(&o->reasoning, r->sent_reasoning));
    if (o->content.len > r->sent_content) json_object_set_new(d, "content", json_buf(&o->content, r->sent_content));
    json_t *calls = json_array();
    if (o->n_calls > r->sent_calls) r->sent_args = xrealloc(r->sent_args, o->n_calls * sizeof *r->sent_args);
    for (size_t i = 0; i < o->n_calls; i++) {
        const buf_t *args = &o->calls[i].args;
        if (i >= r->sent_calls)
            json_array_append_new(calls, tool_call_json(r, i, true));
        else if (args->len > r->sent_args[i])
            json_array_append_new(calls, json_pack("{s:I, s:{s:o}}", "index", (json_int_t)i, "function", "arguments",
                                                   json_buf(args, r->sent_args[i])));
        r->sent_args[i] = args->len;
    }
    r->sent_calls = o->n_calls;
    r->sent_content = o->content.len;
    r->sent_reasoning = o->reasoning.len;
    if (json_array_size(calls))
        json_object_set_new(d, "tool_calls", calls);
    else
        json_decref(calls);
    if (!json_object_size(d)) {
        json_decref(d);
        return NULL;
    }
    return json_pack("{s:s, s:o}", "id", r->id, "delta", d);
}

int response_push(response_t *r, const uint32_t *ids, size_t n, json_t **delta, char *err, size_t errlen)
{
    if (delta) *delta = NULL;
    buf_clear(&r->text);
    if (textstream_push(&r->ts, ids, n, &r->text, err, errlen) < 0) return -1;
    outparse_push(&r->out, (const char *)r->text.data, r->text.len);
    if (delta) *delta = take_delta(r);
    return r->out.stopped;
}

static json_t *usage_json(uint64_t prompt_tokens, uint64_t completion_tokens)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt_tokens, "completion_tokens",
                     (json_int_t)completion_tokens, "total_tokens", (json_int_t)(prompt_tokens + completion_tokens));
}

static json_t *tool_calls_json(const response_t *r)
{
    json_t *calls = json_array();
    for (size_t i = 0; i < r->out.n_calls; i++) json_array_append_new(calls, tool_call_json(r, i, false));
    return calls;
}

/* The answer's fields: content as `content_key`, reasoning in thinking mode, tool calls. */
static void set_answer(json_t *obj, const response_t *r, const char *content_key)
{
    json_object_set_new(obj, content_key, json_buf(&r->out.content, 0));
    if (r->thinking) json_object_set_new(obj, "reasoning_content", json_buf(&r->out.reasoning, 0));
    if (r->out.n_calls) json_object_set_new(obj, "tool_calls", tool_calls_json(r));
}

static json_t *string_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* "<prefix><id>" as a JSON string. */
static json_t *prefixed_id(const char *prefix, const char *id)
{
    buf_t b = {0};
    buf_printf(&b, "%s%s", prefix, id ? id : "");
    json_t *s = json_string(buf_cstr(&b));
    buf_free(&b);
    return s;
}

static json_t *batch_line(const response_t *r, const char *finish_reason, json_t *usage)
{
    json_t *message = json_pack("{s:s}", "role", "assistant");
    set_answer(message, r, "content");
    json_t *body = json_pack("{s:o, s:s, s:I, s:s, s:[{s:i, s:o, s:s}], s:o}", "id", prefixed_id("chatcmpl-", r->id), "object",
                             "chat.completion", "created", (json_int_t)time(NULL), "model",
                             r->model ? r->model : RESPONSE_DEFAULT_MODEL, "choices", "index", 0, "message", message,
                             "finish_reason", finish_reason, "usage", usage);
    return json_pack("{s:o, s:o, s:{s:i, s:s, s:o}, s:n}", "id", prefixed_id("batch_req_", r->id), "custom_id",
                     string_or_null(r->custom_id), "response", "status_code", 200,
                     "request_id", r->id, "body", body, "error");
}

json_t *response_finish(response_t *r, const char *finish_reason, uint64_t prompt_tokens, uint64_t completion_tokens,
                        json_t **delta)
{
    buf_clear(&r->text);
    textstream_finish(&r->ts, &r->text);
    outparse_push(&r->out, (const char *)r->text.data, r->text.len);
    outparse_finish(&r->out);
    if (delta) *delta = take_delta(r);

    if (!finish_reason || r->out.stopped) finish_reason = "stop";
    if (!strcmp(finish_reason, "stop") && r->out.n_calls) finish_reason = "tool_calls";
    json_t *usage = usage_json(prompt_tokens, completion_tokens);
    if (r->shape == SHAPE_BATCH) return batch_line(r, finish_reason, usage);
    json_t *line = json_pack("{s:s}", "id", r->id);
    set_answer(line, r, "text");
    json_object_set_new(line, "finish_reason", json_string(finish_reason));
    json_object_set_new(line, "usage", usage);
    return line;
}

json_t *response_error_json(const char *id, const frame_meta_t *meta, const char *stage, const char *code,
                            const char *message)
{
    if (meta && meta->shape == SHAPE_BATCH) {
        return json_pack("{s:o, s:o, s:n, s:{s:o, s:o}}", "id", prefixed_id("batch_req_", id), "custom_id", string_or_null(meta->custom_id),
                         "response", "error", "code", string_or_null(code), "message", string_or_null(message));
    }
    return json_pack("{s:o, s:{s:o, s:o, s:o}}", "id", string_or_null(id), "error", "stage", string_or_null(stage),
                     "code", string_or_null(code), "message", string_or_null(message));
}
