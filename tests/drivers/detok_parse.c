/* Test driver for the sink library: tests/py/test_response_recipe.py feeds it token streams
 * and compares its answers with deepseek-recipe's.
 *
 *   detok_parse [tokenizer.json] < cases.jsonl > results.jsonl
 *
 * One input line per request:
 *   {"id": str, "meta": {"shape": "prompt"|"chat"|"batch", "thinking", "continuation", "tools",
 *    "in_tool_calls", "json": bool, "stop": [str], "custom_id", "model": str},
 *    "chunks": [[id, ...], ...], "finish_reason": str, "prompt_tokens", "completion_tokens": int}
 * One output line per request: {"deltas": [delta lines], "final": final line, "stopped": bool}
 * or {"error": error line} when an id is outside the vocabulary. */
#include "response.h"
#include "tokenizer.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool flag(json_t *meta, const char *key)
{
    return json_is_true(json_object_get(meta, key));
}

static const char *text_or_null(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static request_shape_t shape_of(const char *s)
{
    if (s && !strcmp(s, "chat")) return SHAPE_CHAT;
    if (s && !strcmp(s, "batch")) return SHAPE_BATCH;
    return SHAPE_PROMPT;
}

static json_t *run_case(const tokenizer_t *tok, json_t *c)
{
    json_t *m = json_object_get(c, "meta");
    json_t *stops = json_object_get(m, "stop");
    char *stop[FRAME_MAX_STOPS];
    frame_meta_t meta = {
        .shape = shape_of(text_or_null(m, "shape")),
        .custom_id = (char *)text_or_null(m, "custom_id"),
        .model = (char *)text_or_null(m, "model"),
        .thinking = flag(m, "thinking"),
        .continuation = flag(m, "continuation"),
        .tools = flag(m, "tools"),
        .in_tool_calls = flag(m, "in_tool_calls"),
        .parse_json = flag(m, "json"),
        .stop = stop,
    };
    for (size_t i = 0; i < json_array_size(stops) && i < FRAME_MAX_STOPS; i++)
        stop[meta.n_stop++] = (char *)json_string_value(json_array_get(stops, i));

    const char *id = text_or_null(c, "id");
    response_t *r = response_new(tok, id, &meta);
    json_t *deltas = json_array(), *chunks = json_object_get(c, "chunks");
    bool stopped = false;
    ids_t ids = {0};
    for (size_t i = 0; i < json_array_size(chunks); i++) {
        json_t *chunk = json_array_get(chunks, i);
        ids.n = 0;
        for (size_t j = 0; j < json_array_size(chunk); j++)
            ids_push(&ids, (uint32_t)json_integer_value(json_array_get(chunk, j)));
        json_t *delta;
        char err[256];
        int rc = response_push(r, ids.v, ids.n, &delta, err, sizeof err);
        if (rc < 0) {
            json_decref(deltas);
            response_free(r);
            ids_free(&ids);
            return json_pack("{s:o}", "error", response_error_json(id, &meta, "di-detok", "bad_token", err));
        }
        if (delta) json_array_append_new(deltas, delta);
        stopped |= rc == 1;
    }
    ids_free(&ids);
    json_t *delta;
    json_t *final = response_finish(r, text_or_null(c, "finish_reason"),
                                    (uint64_t)json_integer_value(json_object_get(c, "prompt_tokens")),
                                    (uint64_t)json_integer_value(json_object_get(c, "completion_tokens")), &delta);
    if (delta) json_array_append_new(deltas, delta);
    response_free(r);
    return json_pack("{s:o, s:o, s:b}", "deltas", deltas, "final", final, "stopped", stopped);
}

int main(int argc, char **argv)
{
    char err[256];
    tokenizer_t *tok = tokenizer_load(argc > 1 ? argv[1] : tokenizer_default_path(), err, sizeof err);
    if (!tok) die("%s", err);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_error_t jerr;
        json_t *c = json_loads(line, 0, &jerr);
        if (!c) die("bad case line: %s", jerr.text);
        json_t *out = run_case(tok, c);
        json_dumpf(out, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(out);
        json_decref(c);
    }
    free(line);
    tokenizer_free(tok);
    return 0;
}
