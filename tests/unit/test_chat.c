/* Chat renderer unit cases: exact prompts and special spans for small requests (expected
 * strings taken from deepseek-recipe 0.2.0), plain-text treatment of special-token spellings
 * typed by users, the option fields, rejected requests, the JSON spellings, schema checks,
 * max_tokens resolution and token ids. The broad comparison with recipe is
 * tests/py/test_chat_recipe.py. */
#include "chat.h"
#include "chat_json.h"
#include "chat_schema.h"
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Renders a JSON body; the caller frees p. Returns chat_render's result. */
static int render(const char *json, chat_prompt_t *p, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *body = json_loads(json, JSON_ALLOW_NUL, &jerr);
    if (!body) {
        fprintf(stderr, "bad test JSON: %s\n", jerr.text);
        memset(p, 0, sizeof *p);
        return -2;
    }
    int rc = chat_render(body, p, err, errlen);
    json_decref(body);
    return rc;
}

/* The prompt with each special span wrapped in [[ ]], for readable expectations. */
static char *marked(const chat_prompt_t *p) {
    buf_t b = {0};
    size_t at = 0;
    for (size_t i = 0; i < p->n_special; i++) {
        buf_append(&b, p->text.data + at, p->special[i].start - at);
        buf_puts(&b, "[[");
        buf_append(&b, p->text.data + p->special[i].start, p->special[i].end - p->special[i].start);
        buf_puts(&b, "]]");
        at = p->special[i].end;
    }
    buf_append(&b, p->text.data + at, p->text.len - at);
    buf_cstr(&b);
    return (char *)b.data;
}

static void expect_marked(const char *json, const char *want) {
    chat_prompt_t p;
    char err[256];
    int rc = render(json, &p, err, sizeof err);
    CHECKF(rc == 0, "render %s: %s", json, rc ? err : "");
    if (!rc) {
        char *got = marked(&p);
        CHECK_STR(got, want);
        free(got);
    }
    chat_prompt_free(&p);
}

static void expect_error(const char *json, const char *needle) {
    chat_prompt_t p;
    char err[256] = "";
    int rc = render(json, &p, err, sizeof err);
    CHECKF(rc == -1, "expected an error for %s", json);
    CHECKF(strstr(err, needle) != NULL, "error \"%s\" should mention \"%s\"", err, needle);
    chat_prompt_free(&p);
}

#define V41 "\"model\":\"DeepSeek-V4.1-Flash\""
#define V4 "\"model\":\"DeepSeek-V4-Pro\""
#define OFF "\"thinking\":{\"type\":\"disabled\"}"
#define EFFORT75 "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n"

static void test_basic_prompts(void) {
    expect_marked("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜System｜>]]" EFFORT75 "[[<｜User｜>]]Hello[[<｜Assistant｜>]][[<think>]]");
    expect_marked("{" V41 "," OFF ",\"messages\":[{\"role\":\"system\",\"content\":\"Sys\"},{\"role\":\"user\",\"content\":\"Hi\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜System｜>]]Sys[[<｜User｜>]]Hi[[<｜Assistant｜>]][[</think>]]");
    /* V4 has no system token and puts every system message first. */
    expect_marked("{" V4 "," OFF ",\"messages\":[{\"role\":\"user\",\"content\":\"u1\"},{\"role\":\"system\",\"content\":\"S\"},"
                  "{\"role\":\"user\",\"content\":\"u2\"}]}",
                  "[[<｜begin▁of▁sentence｜>]]S[[<｜User｜>]]u1\n\nu2[[<｜Assistant｜>]][[</think>]]");
    expect_marked("{" V41 "," OFF ",\"messages\":[{\"role\":\"user\",\"content\":\"u1\"},{\"role\":\"system\",\"content\":\"S\"},"
                  "{\"role\":\"user\",\"content\":\"u2\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜User｜>]]u1[[<｜System｜>]]S[[<｜User｜>]]u2[[<｜Assistant｜>]][[</think>]]");
    expect_marked("{" V41 ",\"reasoning_effort\":\"max\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜System｜>]]Reasoning Effort: 100 (range 1-100, the higher the value, the "
                  "more thorough the reasoning)\n\n[[<｜User｜>]]q[[<｜Assistant｜>]][[<think>]]");
    expect_marked("{" V41 ",\"reasoning_effort\":\"none\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜User｜>]]q[[<｜Assistant｜>]][[</think>]]");
}

static void test_history_and_tools(void) {
    /* Earlier reasoning is dropped without tools... */
    expect_marked("{" V41 ",\"reasoning_effort\":\"low\",\"messages\":[{\"role\":\"user\",\"content\":\"u1\"},"
                  "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},{\"role\":\"user\",\"content\":\"u2\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜System｜>]]Reasoning Effort: 50 (range 1-100, the higher the value, the more "
                  "thorough the reasoning)\n\n[[<｜User｜>]]u1[[<｜Assistant｜>]][[</think>]]a1[[<｜end▁of▁sentence｜>]]"
                  "[[<｜User｜>]]u2[[<｜Assistant｜>]][[<think>]]");
    /* ...a tool call renders in DSML, its arguments JSON in Python's spelling. */
    expect_marked("{" V41 "," OFF ",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"tool_calls\":"
                  "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"now\",\"arguments\":\"{\\\"a\\\":[1,2.5],\\\"s\\\":\\\"x\\\"}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"done\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜User｜>]]Hi[[<｜Assistant｜>]][[</think>]]\n\n<[[｜DSML｜]] calls>\n"
                  "<[[｜DSML｜]] invoke name=\"now\">\n<[[｜DSML｜]] parameter name=\"a\" string=\"false\">[1, 2.5]</[[｜DSML｜]] parameter>\n"
                  "<[[｜DSML｜]] parameter name=\"s\" string=\"true\">x</[[｜DSML｜]] parameter>\n</[[｜DSML｜]] invoke>\n"
                  "</[[｜DSML｜]] calls>[[<｜end▁of▁sentence｜>]][[<｜User｜>]]<tool_result>done</tool_result>"
                  "[[<｜Assistant｜>]][[</think>]]");
    /* The tool prompt goes in a system message at the head; required opens the call block. */
    chat_prompt_t p;
    char err[256];
    int rc = render("{" V41 "," OFF ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"now\"}}],"
                    "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &p, err, sizeof err);
    CHECK_EQ(rc, 0);
    char *m = marked(&p);
    CHECK(!strncmp(m, "[[<｜begin▁of▁sentence｜>]][[<｜System｜>]]\n\n## Tools\n\nYou have access to a set of tools", 96));
    CHECK(strstr(m, "### Available Tool Schemas\n\n{\"name\": \"now\", \"description\": \"\", \"parameters\": {}}\n\n") != NULL);
    size_t n = strlen(m);
    const char *tail = "[[<｜Assistant｜>]][[</think>]]\n\n<[[｜DSML｜]] calls>\n";
    CHECK(n > strlen(tail) && !strcmp(m + n - strlen(tail), tail));
    CHECK(p.tools && p.starts_in_tool_calls);
    CHECK_EQ(p.constraint, CHAT_CONSTRAINT_TOOL_CALL_REQUIRED);
    CHECK_STR(buf_cstr(&p.constraint_text),
              "[{\"type\":\"function\",\"function\":{\"name\":\"now\",\"description\":null,\"parameters\":{},\"strict\":null}}]");
    free(m);
    chat_prompt_free(&p);
}

static void test_prefix(void) {
    expect_marked("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                  "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"Let me\",\"prefix\":true}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜System｜>]]" EFFORT75 "[[<｜User｜>]]q[[<｜Assistant｜>]][[<think>]]Let me");
    chat_prompt_t p;
    char err[256];
    CHECK_EQ(render("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"Part\","
                    "\"prefix\":true}]}", &p, err, sizeof err), 0);
    CHECK_EQ(p.stage, CHAT_STAGE_CONTENT_CONTINUATION);
    CHECK(p.text.len > 4 && !memcmp(p.text.data + p.text.len - 4, "Part", 4));
    chat_prompt_free(&p);
}

/* A user typing a control token's spelling gets plain text: no span covers it. Grounding
 * tokens in assistant history stay tokens. */
static void test_special_spellings(void) {
    expect_marked("{" V41 "," OFF ",\"messages\":[{\"role\":\"user\",\"content\":\"<｜User｜><think>｜DSML｜<｜ref｜>\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜User｜>]]<｜User｜><think>｜DSML｜<｜ref｜>[[<｜Assistant｜>]][[</think>]]");
    expect_marked("{" V41 "," OFF ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":"
                  "\"<｜ref｜>cat<｜/ref｜> <｜User｜>\"},{\"role\":\"user\",\"content\":\"r\"}]}",
                  "[[<｜begin▁of▁sentence｜>]][[<｜User｜>]]q[[<｜Assistant｜>]][[</think>]][[<｜ref｜>]]cat[[<｜/ref｜>]] <｜User｜>"
                  "[[<｜end▁of▁sentence｜>]][[<｜User｜>]]r[[<｜Assistant｜>]][[</think>]]");
    /* NUL bytes in content survive (lengths, not C strings). */
    chat_prompt_t p;
    char err[256];
    CHECK_EQ(render("{" V41 "," OFF ",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", &p, err, sizeof err), 0);
    CHECK(p.text.len > 3 && memmem(p.text.data, p.text.len, "a\0b", 3) != NULL);
    chat_prompt_free(&p);
}

static void test_options(void) {
    chat_prompt_t p;
    char err[256];
    CHECK_EQ(render("{" V41 "," OFF ",\"temperature\":0.7,\"top_p\":0.5,\"max_tokens\":100,\"seed\":7,\"stop\":[\"END\"],"
                    "\"logprobs\":true,\"top_logprobs\":3,\"response_format\":{\"type\":\"regex\",\"regex\":\"[a-z]+\"},"
                    "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", &p, err, sizeof err), 0);
    CHECK(!p.thinking && p.stage == CHAT_STAGE_NONE);
    CHECK(p.temperature == (double)0.7f);
    CHECK(p.top_p == 1); /* V4.1 ignores top_p outside thinking mode */
    CHECK_EQ(p.max_tokens, 100);
    CHECK(p.has_seed && p.seed == 7);
    CHECK(p.n_stop == 1 && p.stop[0].len == 3 && !memcmp(p.stop[0].data, "END", 3));
    CHECK(p.logprobs && p.top_logprobs == 3);
    CHECK_EQ(p.constraint, CHAT_CONSTRAINT_REGEX);
    CHECK_STR(buf_cstr(&p.constraint_text), "[a-z]+");
    chat_prompt_free(&p);

    CHECK_EQ(render("{" V41 ",\"temperature\":0.2,\"top_p\":0.5,\"messages\":[{\"role\":\"user\",\"content\":\"json\"}],"
                    "\"response_format\":{\"type\":\"json_object\"}}", &p, err, sizeof err), 0);
    CHECK(p.thinking && p.stage == CHAT_STAGE_REASONING_START);
    CHECK(p.temperature == 1);            /* thinking mode samples at 1 */
    CHECK(p.top_p == (double)0.95f);      /* and raises top_p to 0.95 */
    CHECK(p.parse_json_output && p.constraint == CHAT_CONSTRAINT_JSON && p.constraint_text.len == 0);
    CHECK_EQ(p.max_tokens, -1);
    chat_prompt_free(&p);
}

static void test_errors(void) {
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "model");
    expect_error("{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "DeepSeek-V4.1-Flash");
    expect_error("{" V41 ",\"messages\":[]}", "empty");
    expect_error("[1,2]", "JSON object");
    expect_error("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
                 "\"http://x/a.png\"}}]}]}", "image input is not supported: text-only engine");
    expect_error("{" V41 ",\"messages\":[{\"role\":\"developer\",\"content\":\"d\"}]}", "developer");
    expect_error("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"tool\",\"tool_call_id\":\"x\","
                 "\"content\":\"r\"}]}", "tool message");
    expect_error("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\","
                 "\"prefix\":true},{\"role\":\"user\",\"content\":\"r\"}]}", "prefix");
    expect_error("{" V41 ",\"response_format\":{\"type\":\"json_object\"},\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                 "json");
    expect_error("{" V41 ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "thinking mode");
    expect_error("{" V41 ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}],"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "name");
    expect_error("{" V41 ",\"temperature\":2.5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "temperature");
    expect_error("{" V41 ",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "max_tokens");
    expect_error("{" V41 ",\"stop\":[\"\"],\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "stop");
    /* Integers past 64 bits in tool arguments cannot be rendered as recipe does: refused. */
    expect_error("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":"
                 "[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":18446744073709551616}\"}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}]}", "64 bits");
    expect_error("{" V41 ",\"reasoning_effort\":\"extreme\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "extreme");
    /* A long non-ASCII value quoted in an error is cut at a character boundary. */
    buf_t body = {0};
    buf_puts(&body, "{\"model\":\"");
    for (int i = 0; i < 200; i++) buf_puts(&body, "é");
    buf_puts(&body, "\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}");
    chat_prompt_t p;
    char err[101];
    CHECK_EQ(render(buf_cstr(&body), &p, err, sizeof err), -1);
    json_t *as_json = json_string(err); /* NULL if err is not valid UTF-8 */
    CHECK(as_json != NULL);
    json_decref(as_json);
    chat_prompt_free(&p);
    buf_free(&body);
}

static void expect_json(const char *in, chat_json_style_t style, const char *want) {
    json_error_t jerr;
    json_t *v = json_loads(in, JSON_DECODE_ANY, &jerr);
    CHECKF(v != NULL, "parse %s", in);
    buf_t b = {0};
    chat_json_write(&b, v, style);
    CHECK_STR(buf_cstr(&b), want);
    buf_free(&b);
    json_decref(v);
}

static void test_json_spellings(void) {
    const char *in = "{\"b\":[1,1.0,1e-7,0.00001,0.0001,1e15,1e16,-0.0,0.1],\"a\":\"q\\\"\\\\\\n\\u0001\\u007fé\"}";
    expect_json(in, CHAT_JSON_PYTHON,
                "{\"b\": [1, 1.0, 1e-07, 1e-05, 0.0001, 1000000000000000.0, 1e+16, -0.0, 0.1], \"a\": \"q\\\"\\\\\\n\\u0001\x7f" "é\"}");
    expect_json(in, CHAT_JSON_SPACED,
                "{\"b\": [1, 1.0, 1e-7, 0.00001, 0.0001, 1000000000000000.0, 1e+16, -0.0, 0.1], \"a\": \"q\\\"\\\\\\n\\u0001\x7f" "é\"}");
    expect_json(in, CHAT_JSON_COMPACT,
                "{\"b\":[1,1.0,1e-7,0.00001,0.0001,1000000000000000.0,1e+16,-0.0,0.1],\"a\":\"q\\\"\\\\\\n\\u0001\x7f" "é\"}");
    expect_json("[1.2345678901234568e+29, 5e-324, 1.7976931348623157e308, 0.30000000000000004]", CHAT_JSON_PYTHON,
                "[1.2345678901234568e+29, 5e-324, 1.7976931348623157e+308, 0.30000000000000004]");
}

static json_t *J(const char *s) { return json_loads(s, JSON_DECODE_ANY, NULL); }

static void test_schemas(void) {
    char err[256];
    static const char *const valid[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^a+$\"}}}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/A\"}},\"$defs\":{\"A\":{\"type\":\"integer\"}}}",
        "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"items\":[{\"type\":\"string\"}]}",
        "true",
        "{\"maxLength\":1e98}", /* an integer past 2^63 */
    };
    static const char *const invalid[] = {
        "{\"type\":\"strin\"}", "{\"properties\":5}", "{\"required\":[\"a\",\"a\"]}", "{\"minLength\":-1}", "{\"maxLength\":1.5}",
        "{\"pattern\":\"(\"}", "{\"$ref\":\"#/nope\"}", "{\"$ref\":\"http://example.com/s.json\"}", "{\"items\":[{}]}",
        "{\"$schema\":\"x\"}", "{\"anyOf\":[]}", "5",
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(valid); i++) {
        json_t *s = J(valid[i]);
        CHECKF(chat_schema_valid(s, err, sizeof err), "valid schema %s rejected: %s", valid[i], err);
        json_decref(s);
    }
    for (size_t i = 0; i < DI_ARRAY_LEN(invalid); i++) {
        json_t *s = J(invalid[i]);
        CHECKF(!chat_schema_valid(s, err, sizeof err), "invalid schema %s accepted", invalid[i]);
        json_decref(s);
    }
    /* Strict form: closed objects, every property required, the typed model's fields only. */
    json_t *s = J("{\"type\":\"object\",\"title\":\"T\",\"description\":\"D\",\"properties\":{\"b\":{\"type\":\"integer\",\"enum\":[1],"
                  "\"minimum\":0},\"a\":{\"type\":\"array\",\"description\":\"list\",\"items\":{\"type\":\"object\",\"properties\":"
                  "{\"x\":{\"type\":\"string\",\"format\":\"email\"}}}}}}");
    json_t *strict = chat_schema_strict(s, true, err, sizeof err);
    CHECK(strict != NULL);
    buf_t b = {0};
    if (strict) chat_json_write(&b, strict, CHAT_JSON_COMPACT);
    CHECK_STR(buf_cstr(&b),
              "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\",\"minimum\":0},\"a\":{\"type\":\"array\",\"items\":"
              "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"email\"}},\"additionalProperties\":false,"
              "\"required\":[\"x\"]},\"description\":\"list\"}},\"additionalProperties\":false,\"required\":[\"b\",\"a\"],"
              "\"description\":\"D\"}");
    buf_free(&b);
    json_decref(strict);
    json_decref(s);
    static const char *const not_strict[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\"}}}", /* nested object without properties */
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[]}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":true}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"x\"]}}}",
        "{\"type\":\"string\"}",
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(not_strict); i++) {
        json_t *v = J(not_strict[i]);
        json_t *out = chat_schema_strict(v, true, err, sizeof err);
        CHECKF(out == NULL, "strict form of %s should fail", not_strict[i]);
        json_decref(out);
        json_decref(v);
    }
}

static void test_max_tokens(void) {
    chat_prompt_t p = {0};
    int64_t out;
    char err[256];
    p.max_tokens = -1;
    p.thinking = false;
    CHECK(chat_resolve_max_tokens(&p, 10, 1000000, &out, err, sizeof err) == 0 && out == 8192);
    p.thinking = true;
    CHECK(chat_resolve_max_tokens(&p, 10, 1000000, &out, err, sizeof err) == 0 && out == 65536);
    p.max_effort = true;
    CHECK(chat_resolve_max_tokens(&p, 10, 1000000, &out, err, sizeof err) == 0 && out == 131072);
    CHECK(chat_resolve_max_tokens(&p, 10, 100, &out, err, sizeof err) == 0 && out == 90);
    CHECK(chat_resolve_max_tokens(&p, 100, 100, &out, err, sizeof err) == 0 && out == 1);
    CHECK(chat_resolve_max_tokens(&p, 101, 100, &out, err, sizeof err) == -1);
    p.max_tokens = 90;
    CHECK(chat_resolve_max_tokens(&p, 10, 100, &out, err, sizeof err) == 0 && out == 90);
    CHECK(chat_resolve_max_tokens(&p, 11, 100, &out, err, sizeof err) == -1);
}

/* Ids from recipe's DeepseekV4Encoding.encode with the V4 tokenizer. */
static void test_encode(void) {
    char err[512];
    tokenizer_t *tok = tokenizer_load(t_data_path("tokenizer/tokenizer.json"), err, sizeof err);
    if (!tok) {
        t_skip("test_encode", "no tokenizer in $DI_DATA");
        return;
    }
    chat_prompt_t p;
    CHECK_EQ(render("{" V4 "," OFF ",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                    "\"<｜User｜>hi\"},{\"role\":\"assistant\",\"content\":\"<｜ref｜>x<｜/ref｜>\"},{\"role\":\"user\",\"content\":\"ok\"}]}",
                    &p, err, sizeof err), 0);
    static const uint32_t want[] = {0, 7153, 9708, 16, 128803, 30, 28217, 6756, 28217, 32, 6366, 128804, 128822,
                                    129278, 90, 129277, 1, 128803, 633, 128804, 128822};
    ids_t ids = {0};
    CHECK_EQ(chat_encode(tok, &p, &ids, err, sizeof err), 0);
    CHECK_EQ(ids.n, DI_ARRAY_LEN(want));
    bool same = ids.n == DI_ARRAY_LEN(want);
    for (size_t i = 0; same && i < ids.n; i++) same = ids.v[i] == want[i];
    CHECK(same);
    ids_free(&ids);
    chat_prompt_free(&p);
    /* The V4 tokenizer has no <｜System｜>: a V4.1 prompt says so instead of guessing. */
    CHECK_EQ(render("{" V41 ",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", &p, err, sizeof err), 0);
    CHECK_EQ(chat_encode(tok, &p, &ids, err, sizeof err), -1);
    CHECK(strstr(err, "<｜System｜>") != NULL);
    ids_free(&ids);
    chat_prompt_free(&p);
    tokenizer_free(tok);
}

int main(void) {
    RUN(test_basic_prompts);
    RUN(test_history_and_tools);
    RUN(test_prefix);
    RUN(test_special_spellings);
    RUN(test_options);
    RUN(test_errors);
    RUN(test_json_spellings);
    RUN(test_schemas);
    RUN(test_max_tokens);
    RUN(test_encode);
    return t_finish();
}
