/* Test driver: one Chat Completions body per input line -> one JSON line with the rendered
 * prompt, its special spans (byte offsets), the derived options and, given a tokenizer, the
 * token ids; or {"ok": false, "error": ...}. tests/py/test_chat_recipe.py compares it with
 * deepseek-recipe.
 *
 *   chat_render [--tokenizer tokenizer.json] < bodies.jsonl */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const STAGES[] = {"none", "reasoning_start", "reasoning_continuation", "content_continuation"};
static const char *const CONSTRAINTS[] = {"none", "json", "regex", "tool_call", "tool_call_required"};

static json_t *describe(const chat_prompt_t *p, const tokenizer_t *tok) {
    json_t *o = json_object(), *spans = json_array(), *stop = json_array();
    json_object_set_new(o, "ok", json_true());
    json_object_set_new(o, "model", json_string(p->model == CHAT_MODEL_V4 ? "v4" : "v41"));
    json_object_set_new(o, "prompt", json_stringn((const char *)p->text.data, p->text.len));
    for (size_t i = 0; i < p->n_special; i++)
        json_array_append_new(spans, json_pack("[I,I]", (json_int_t)p->special[i].start, (json_int_t)p->special[i].end));
    json_object_set_new(o, "special", spans);
    json_object_set_new(o, "thinking", json_boolean(p->thinking));
    json_object_set_new(o, "stage", json_string(STAGES[p->stage]));
    json_object_set_new(o, "tools", json_boolean(p->tools));
    json_object_set_new(o, "starts_in_tool_calls", json_boolean(p->starts_in_tool_calls));
    json_object_set_new(o, "parse_json_output", json_boolean(p->parse_json_output));
    for (size_t i = 0; i < p->n_stop; i++) json_array_append_new(stop, json_stringn((const char *)p->stop[i].data, p->stop[i].len));
    json_object_set_new(o, "stop", stop);
    json_object_set_new(o, "temperature", json_real(p->temperature));
    json_object_set_new(o, "top_p", json_real(p->top_p));
    json_object_set_new(o, "max_tokens", p->max_tokens < 0 ? json_null() : json_integer(p->max_tokens));
    json_object_set_new(o, "seed", p->has_seed ? json_integer((json_int_t)p->seed) : json_null());
    json_object_set_new(o, "logprobs", json_boolean(p->logprobs));
    json_object_set_new(o, "top_logprobs", p->top_logprobs < 0 ? json_null() : json_integer(p->top_logprobs));
    json_object_set_new(o, "stream", json_boolean(p->stream));
    json_object_set_new(o, "constraint", p->constraint == CHAT_CONSTRAINT_NONE ? json_null()
        : json_pack("{s:s, s:s%}", "kind", CONSTRAINTS[p->constraint], "text", p->constraint_text.data ? (const char *)p->constraint_text.data : "",
                    p->constraint_text.len));
    if (tok) {
        ids_t ids = {0};
        char err[512];
        if (chat_encode(tok, p, &ids, err, sizeof err)) {
            json_object_set_new(o, "ids_error", json_string(err));
        } else {
            json_t *a = json_array();
            for (size_t i = 0; i < ids.n; i++) json_array_append_new(a, json_integer(ids.v[i]));
            json_object_set_new(o, "ids", a);
        }
        ids_free(&ids);
    }
    return o;
}

int main(int argc, char **argv) {
    tokenizer_t *tok = NULL;
    char err[512];
    if (argc == 3 && !strcmp(argv[1], "--tokenizer")) {
        if (!(tok = tokenizer_load(argv[2], err, sizeof err))) die("%s", err);
    } else if (argc != 1) {
        die("usage: chat_render [--tokenizer tokenizer.json] < bodies.jsonl");
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t jerr;
        json_t *body = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &jerr), *out;
        chat_prompt_t p;
        if (!body) {
            out = json_pack("{s:b, s:s}", "ok", 0, "error", jerr.text);
        } else if (chat_render(body, &p, err, sizeof err)) {
            out = json_pack("{s:b, s:s}", "ok", 0, "error", err);
            chat_prompt_free(&p);
        } else {
            out = describe(&p, tok);
            chat_prompt_free(&p);
        }
        char *s = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(s);
        free(s);
        json_decref(out);
        json_decref(body);
    }
    free(line);
    tokenizer_free(tok);
    return 0;
}
