/* Response lines: the three output shapes, error lines, streaming deltas, finish reasons.
 * (tests/py/test_response_recipe.py checks the parsed answers against deepseek-recipe.) */
#include "response.h"
#include "testlib.h"
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

static tokenizer_t *tok;

static ids_t encode(const char *text)
{
    ids_t ids = {0};
    tokenizer_encode_with_added(tok, text, strlen(text), &ids);
    return ids;
}

static const char *get_str(json_t *obj, const char *path)
{
    /* path: keys separated by '.', array index as a number */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = obj;
    for (char *k = strtok(buf, "."); k && v; k = strtok(NULL, "."))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(k)) : json_object_get(v, k);
    return json_is_string(v) ? json_string_value(v) : "<missing>";
}

/* Runs one request through the library, all ids in one push; returns the final line. */
static json_t *answer(const frame_meta_t *meta, const char *text, const char *finish_reason)
{
    response_t *r = response_new(tok, "req-1", meta);
    ids_t ids = encode(text);
    char err[128];
    CHECK(response_push(r, ids.v, ids.n, NULL, err, sizeof err) >= 0);
    json_t *line = response_finish(r, finish_reason, 7, ids.n, NULL);
    ids_free(&ids);
    response_free(r);
    return line;
}

static const char CALL[] = "r</think>On it.<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get\">\n<｜DSML｜ parameter name=\"q\" "
                           "string=\"true\">x</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

static void test_prompt_shape(void)
{
    char *stop[] = {"\n\n"};
    frame_meta_t meta = {.shape = SHAPE_PROMPT, .stop = stop, .n_stop = 1};
    json_t *line = answer(&meta, "\nfirst</think>\n\nsecond", "length");
    CHECK_STR(get_str(line, "id"), "req-1");
    CHECK_STR(get_str(line, "text"), "\nfirst</think>");
    CHECK_STR(get_str(line, "finish_reason"), "stop"); /* the stop string, whatever decode said */
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(line, "usage"), "total_tokens")),
             7 + json_integer_value(json_object_get(json_object_get(line, "usage"), "completion_tokens")));
    CHECK(!json_object_get(line, "reasoning_content"));
    CHECK_EQ(json_object_size(line), 4);
    json_decref(line);
}

static void test_chat_shape_with_tool_calls(void)
{
    frame_meta_t meta = {.shape = SHAPE_CHAT, .thinking = true, .tools = true};
    json_t *line = answer(&meta, CALL, "stop");
    CHECK_STR(get_str(line, "text"), "On it.");
    CHECK_STR(get_str(line, "reasoning_content"), "r");
    CHECK_STR(get_str(line, "finish_reason"), "tool_calls");
    CHECK_STR(get_str(line, "tool_calls.0.type"), "function");
    CHECK_STR(get_str(line, "tool_calls.0.function.name"), "get");
    CHECK_STR(get_str(line, "tool_calls.0.function.arguments"), "{\"q\": \"x\"}");
    CHECK(!strncmp(get_str(line, "tool_calls.0.id"), "call_00_", 8) && strlen(get_str(line, "tool_calls.0.id")) == 32);
    json_decref(line);

    /* Cut short by max_tokens: the finish reason stays "length". */
    line = answer(&meta, CALL, "length");
    CHECK_STR(get_str(line, "finish_reason"), "length");
    json_decref(line);

    /* Without thinking there is no reasoning_content. */
    frame_meta_t plain = {.shape = SHAPE_CHAT};
    line = answer(&plain, "hello", "stop");
    CHECK(!json_object_get(line, "reasoning_content") && !json_object_get(line, "tool_calls"));
    CHECK_STR(get_str(line, "finish_reason"), "stop");
    json_decref(line);
}

static void test_batch_shape(void)
{
    frame_meta_t meta = {.shape = SHAPE_BATCH, .custom_id = "task-9", .model = "m1", .thinking = true, .tools = true};
    json_t *line = answer(&meta, CALL, "stop");
    CHECK_STR(get_str(line, "id"), "batch_req_req-1");
    CHECK_STR(get_str(line, "custom_id"), "task-9");
    CHECK(json_is_null(json_object_get(line, "error")));
    json_t *resp = json_object_get(line, "response");
    CHECK_EQ(json_integer_value(json_object_get(resp, "status_code")), 200);
    CHECK_STR(get_str(resp, "request_id"), "req-1");
    CHECK_STR(get_str(resp, "body.object"), "chat.completion");
    CHECK_STR(get_str(resp, "body.model"), "m1");
    CHECK_STR(get_str(resp, "body.choices.0.message.role"), "assistant");
    CHECK_STR(get_str(resp, "body.choices.0.message.content"), "On it.");
    CHECK_STR(get_str(resp, "body.choices.0.message.reasoning_content"), "r");
    CHECK_STR(get_str(resp, "body.choices.0.message.tool_calls.0.function.name"), "get");
    CHECK_STR(get_str(resp, "body.choices.0.finish_reason"), "tool_calls");
    CHECK(json_is_integer(json_object_get(json_object_get(resp, "body"), "created")));
    json_decref(line);
}

static void test_error_lines(void)
{
    json_t *e = response_error_json("r7", NULL, "di-decode", "internal", "GPU fell over");
    CHECK_STR(get_str(e, "id"), "r7");
    CHECK_STR(get_str(e, "error.stage"), "di-decode");
    CHECK_STR(get_str(e, "error.code"), "internal");
    CHECK_STR(get_str(e, "error.message"), "GPU fell over");
    json_decref(e);

    e = response_error_json(NULL, NULL, NULL, NULL, "not JSON");
    CHECK(json_is_null(json_object_get(e, "id")));
    CHECK(json_is_null(json_object_get(json_object_get(e, "error"), "code")));
    json_decref(e);

    frame_meta_t meta = {.shape = SHAPE_BATCH, .custom_id = "task-1"};
    e = response_error_json("r8", &meta, "di-tokenize", "bad_request", "no messages");
    CHECK_STR(get_str(e, "id"), "batch_req_r8");
    CHECK_STR(get_str(e, "custom_id"), "task-1");
    CHECK(json_is_null(json_object_get(e, "response")));
    CHECK_STR(get_str(e, "error.code"), "bad_request");
    CHECK_STR(get_str(e, "error.message"), "no messages");
    json_decref(e);
}

static void test_deltas_add_up(void)
{
    frame_meta_t meta = {.shape = SHAPE_CHAT, .thinking = true, .tools = true};
    response_t *r = response_new(tok, "s1", &meta);
    ids_t ids = encode(CALL);
    buf_t content = {0}, reasoning = {0}, args = {0};
    int first_call_deltas = 0;
    char err[128];
    for (size_t i = 0; i <= ids.n; i++) {
        json_t *delta;
        if (i < ids.n)
            CHECK_EQ(response_push(r, ids.v + i, 1, &delta, err, sizeof err), 0);
        else
            json_decref(response_finish(r, "stop", 1, ids.n, &delta));
        if (!delta) continue;
        CHECK_STR(get_str(delta, "id"), "s1");
        json_t *d = json_object_get(delta, "delta");
        if (json_object_get(d, "content")) buf_puts(&content, get_str(d, "content"));
        if (json_object_get(d, "reasoning_content")) buf_puts(&reasoning, get_str(d, "reasoning_content"));
        json_t *calls = json_object_get(d, "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_t *c = json_array_get(calls, k);
            if (json_object_get(c, "id")) {
                first_call_deltas++;
                CHECK_STR(get_str(c, "function.name"), "get");
            }
            buf_puts(&args, get_str(c, "function.arguments"));
        }
        json_decref(delta);
    }
    CHECK_STR(buf_cstr(&content), "On it.");
    CHECK_STR(buf_cstr(&reasoning), "r");
    CHECK_STR(buf_cstr(&args), "{\"q\": \"x\"}");
    CHECK_EQ(first_call_deltas, 1);
    buf_free(&content);
    buf_free(&reasoning);
    buf_free(&args);
    ids_free(&ids);
    response_free(r);
}

static void test_eos_and_bad_ids(void)
{
    frame_meta_t meta = {.shape = SHAPE_PROMPT};
    response_t *r = response_new(tok, "e", &meta);
    ids_t ids = encode("done<｜end▁of▁sentence｜>");
    CHECK_EQ(ids.n >= 2, 1);
    char err[128];
    CHECK_EQ(response_push(r, ids.v, ids.n, NULL, err, sizeof err), 0);
    uint32_t bad = 0xffffffu;
    CHECK_EQ(response_push(r, &bad, 1, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "16777215") != NULL);
    json_t *line = response_finish(r, "stop", 1, 2, NULL);
    CHECK_STR(get_str(line, "text"), "done"); /* the end-of-sentence token is not text */
    json_decref(line);
    ids_free(&ids);
    response_free(r);
}

static void test_stop_string_reported_by_push(void)
{
    char *stop[] = {"END"};
    frame_meta_t meta = {.shape = SHAPE_CHAT, .stop = stop, .n_stop = 1};
    response_t *r = response_new(tok, "s", &meta);
    ids_t a = encode("one E"), b = encode("ND two");
    char err[128];
    json_t *delta;
    CHECK_EQ(response_push(r, a.v, a.n, &delta, err, sizeof err), 0);
    CHECK_STR(get_str(delta, "delta.content"), "one "); /* "E" held back */
    json_decref(delta);
    CHECK_EQ(response_push(r, b.v, b.n, &delta, err, sizeof err), 1);
    CHECK(delta == NULL);
    json_t *line = response_finish(r, "length", 1, 4, NULL);
    CHECK_STR(get_str(line, "text"), "one ");
    CHECK_STR(get_str(line, "finish_reason"), "stop");
    json_decref(line);
    ids_free(&a);
    ids_free(&b);
    response_free(r);
}

int main(void)
{
    char err[256];
    tok = tokenizer_load(t_data_path("tokenizer/tokenizer.json"), err, sizeof err);
    if (!tok) {
        t_skip("response", err);
        return t_finish();
    }
    RUN(test_prompt_shape);
    RUN(test_chat_shape_with_tool_calls);
    RUN(test_batch_shape);
    RUN(test_error_lines);
    RUN(test_deltas_add_up);
    RUN(test_eos_and_bad_ids);
    RUN(test_stop_string_reported_by_push);
    tokenizer_free(tok);
    return t_finish();
}
