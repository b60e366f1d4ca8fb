/* The output parser: stop strings, reasoning, DSML tool calls, JSON mode, hold-back while
 * streaming. tests/py/test_response_recipe.py compares it with deepseek-recipe itself. */
#include "kmp.h"
#include "outparse.h"
#include "testlib.h"

#include <stdarg.h>
#include <string.h>

#define DSML "｜DSML｜"

static const char *str(buf_t *b)
{
    return buf_cstr(b);
}

/* Parses the NULL-terminated pieces, one push each, then finishes. */
static void parse(outparse_t *p, const outparse_opts_t *o, ...)
{
    outparse_init(p, o);
    va_list ap;
    va_start(ap, o);
    for (const char *s; (s = va_arg(ap, const char *));) outparse_push(p, s, strlen(s));
    va_end(ap);
    outparse_finish(p);
}

/* Content of plain text under stop strings. */
static void check_stop(char *const *stop, uint32_t n_stop, const char *text, const char *want, bool stopped)
{
    outparse_opts_t o = {.plain = true, .stop = stop, .n_stop = n_stop};
    outparse_t p;
    parse(&p, &o, text, NULL);
    CHECKF(!strcmp(str(&p.content), want), "\"%s\": got \"%s\", want \"%s\"", text, str(&p.content), want);
    CHECK_EQ(p.stopped, stopped);
    outparse_free(&p);
}

static void test_kmp_falls_back_on_mismatch(void)
{
    kmp_t k;
    kmp_init(&k, "aab", 3);
    size_t m = 0;
    const char *text = "aaab";
    for (const char *s = text; *s; s++) m = kmp_step(&k, m, (uint8_t)*s);
    CHECK_EQ(m, 3);
    CHECK_EQ(kmp_step(&k, 2, 'a'), 2); /* "aaa" still ends with "aa" */
    CHECK_EQ(kmp_step(&k, 1, 'x'), 0);
    kmp_free(&k);
}

static void test_stop_string_ends_output(void)
{
    char *stop[] = {"STOP"};
    check_stop(stop, 1, "hello STOP world", "hello ", true);
    check_stop(stop, 1, "STOP", "", true);
    check_stop(stop, 1, "hello STO", "hello STO", false); /* held back, released at the end */
    check_stop(stop, 1, "SSTOP", "S", true);
    char *kmp[] = {"aab"};
    check_stop(kmp, 1, "xaaab", "xa", true);
    char *empty[] = {"", "b"};
    check_stop(empty, 2, "ab", "a", true); /* an empty stop string is ignored */
    char *utf8[] = {"日本"};
    check_stop(utf8, 1, "今日本日", "今", true);
}

static void test_overlapping_stop_strings(void)
{
    /* The first stop string to complete wins; among those completing on the same byte, the
     * earlier in the list (deepseek-recipe's and vLLM's rule). */
    char *a[] = {"bc", "abcd"};
    check_stop(a, 2, "abcd", "a", true);
    char *b[] = {"abc", "bc"};
    check_stop(b, 2, "abcd", "", true);
    char *c[] = {"bc", "abc"};
    check_stop(c, 2, "abcd", "a", true);
}

static void test_stop_string_spanning_pushes_is_held_back(void)
{
    char *stop[] = {"STOP", "<end>"};
    outparse_opts_t o = {.plain = true, .stop = stop, .n_stop = 2};
    outparse_t p;
    outparse_init(&p, &o);
    CHECK(!outparse_push(&p, "one ST", 6));
    CHECK_STR(str(&p.content), "one "); /* "ST" could start STOP */
    CHECK(!outparse_push(&p, "A", 1));
    CHECK_STR(str(&p.content), "one STA"); /* it cannot any more */
    CHECK(!outparse_push(&p, " <en", 4));
    CHECK_STR(str(&p.content), "one STA ");
    CHECK(outparse_push(&p, "d> more", 7));
    CHECK_STR(str(&p.content), "one STA ");
    CHECK(outparse_push(&p, "after", 5)); /* ignored once stopped */
    outparse_finish(&p);
    CHECK_STR(str(&p.content), "one STA ");
    outparse_free(&p);
}

static void test_plain_keeps_chat_markup(void)
{
    outparse_opts_t o = {.plain = true};
    outparse_t p;
    parse(&p, &o, "\n\na</think>b<" DSML " calls>", NULL);
    CHECK_STR(str(&p.content), "\n\na</think>b<" DSML " calls>");
    CHECK_EQ(p.n_calls, 0);
    outparse_free(&p);
}

static void test_thinking_splits_reasoning_from_answer(void)
{
    char *stop[] = {"STOP"};
    outparse_opts_t o = {.thinking = true, .stop = stop, .n_stop = 1};
    outparse_t p;
    parse(&p, &o, "\n\nI think. STOP is", " fine\n\n</th", "ink>\n\nThe answer", NULL);
    CHECK_STR(str(&p.reasoning), "I think. STOP is fine"); /* no stop strings in reasoning */
    CHECK_STR(str(&p.content), "The answer");
    CHECK(!p.stopped);
    outparse_free(&p);

    parse(&p, &o, "r</think>a</think>b STOP c", NULL);
    CHECK_STR(str(&p.reasoning), "r");
    CHECK_STR(str(&p.content), "ab "); /* a second </think> is dropped; the stop string applies */
    CHECK(p.stopped);
    outparse_free(&p);

    parse(&p, &o, "never closed\n", NULL);
    CHECK_STR(str(&p.reasoning), "never closed\n");
    CHECK_STR(str(&p.content), "");
    outparse_free(&p);
}

static void test_answer_drops_leading_newlines_and_stray_think_end(void)
{
    outparse_opts_t o = {0};
    outparse_t p;
    parse(&p, &o, "\n\n  Hi</think>\n\nthere", NULL);
    CHECK_STR(str(&p.content), "  Hi\n\nthere");
    outparse_free(&p);
}

static void test_continuation_keeps_leading_newlines(void)
{
    outparse_opts_t o = {.thinking = true, .continuation = true};
    outparse_t p;
    parse(&p, &o, "\n\nmore thought</think>\n\nanswer", NULL);
    CHECK_STR(str(&p.reasoning), "\n\nmore thought");
    CHECK_STR(str(&p.content), "answer"); /* a new answer still drops them */
    outparse_free(&p);
    outparse_opts_t answer = {.continuation = true};
    parse(&p, &answer, "\n\nmore answer", NULL);
    CHECK_STR(str(&p.content), "\n\nmore answer");
    outparse_free(&p);
}

static const char CALLS[] = "Let me look.\n\n<" DSML " calls>\n"
                            "<" DSML " invoke name=\"get_weather\">\n"
                            "<" DSML " parameter name=\"city\" string=\"true\">Paris \"Ville\"\n</" DSML " parameter>\n"
                            "<" DSML " parameter name=\"opts\" string=\"false\">{\"days\": [1, 2], \"deep\": {\"x\": null}}</" DSML " parameter>\n"
                            "</" DSML " invoke>\n"
                            "<" DSML " invoke name=\"now\">\n"
                            "</" DSML " invoke>\n"
                            "</" DSML " calls>\n\nignored after the block";

static void test_tool_calls(void)
{
    outparse_opts_t o = {.tools = true};
    outparse_t p;
    parse(&p, &o, CALLS, NULL);
    CHECK_STR(str(&p.content), "Let me look.");
    CHECK_EQ(p.n_calls, 2);
    if (p.n_calls == 2) {
        CHECK_STR(p.calls[0].name, "get_weather");
        CHECK_STR(str(&p.calls[0].args), "{\"city\": \"Paris \\\"Ville\\\"\\n\", \"opts\": {\"days\": [1, 2], \"deep\": {\"x\": null}}}");
        CHECK_STR(p.calls[1].name, "now");
        CHECK_STR(str(&p.calls[1].args), "{}");
    }
    outparse_free(&p);

    /* Without tools the markup is text. */
    outparse_opts_t plain = {0};
    parse(&p, &plain, CALLS, NULL);
    CHECK_STR(str(&p.content), CALLS);
    CHECK_EQ(p.n_calls, 0);
    outparse_free(&p);
}

static void test_tool_calls_v4_tags_and_escapes(void)
{
    outparse_opts_t o = {.tools = true};
    outparse_t p;
    parse(&p, &o,
          "<" DSML "tool_calls>\n<" DSML "invoke name=\"f\">\n<" DSML "parameter name=\"s\" string=\"true\">"
          "tab\there\\ \x01 é</" DSML "parameter>\n</" DSML "invoke>\n</" DSML "tool_calls>",
          NULL);
    CHECK_EQ(p.n_calls, 1);
    if (p.n_calls == 1) CHECK_STR(str(&p.calls[0].args), "{\"s\": \"tab\\there\\\\ \\u0001 é\"}");
    outparse_free(&p);
}

static void test_tool_calls_in_reasoning_end_it(void)
{
    outparse_opts_t o = {.thinking = true, .tools = true};
    outparse_t p;
    parse(&p, &o, "thinking\n<" DSML " calls>\n<" DSML " invoke name=\"f\">\n</" DSML " invoke>\n</" DSML " calls>", NULL);
    CHECK_STR(str(&p.reasoning), "thinking");
    CHECK_EQ(p.n_calls, 1);
    outparse_free(&p);
}

static void test_output_starting_inside_tool_calls(void)
{
    outparse_opts_t o = {.tools = true, .in_tool_calls = true, .thinking = true};
    outparse_t p;
    parse(&p, &o, "<" DSML " invoke name=\"f\">\n</" DSML " invoke>\n</" DSML " calls>", NULL);
    CHECK_EQ(p.n_calls, 1);
    CHECK_STR(str(&p.reasoning), "");
    outparse_free(&p);
}

static void test_truncated_tool_call(void)
{
    outparse_opts_t o = {.tools = true};
    outparse_t p;
    /* Cut inside a string value: the call keeps what it got, the held "</｜DS" included. */
    parse(&p, &o, "<" DSML " calls>\n<" DSML " invoke name=\"f\">\n<" DSML " parameter name=\"a\" string=\"true\">ab</｜DS", NULL);
    CHECK_EQ(p.n_calls, 1);
    if (p.n_calls == 1) CHECK_STR(str(&p.calls[0].args), "{\"a\": \"ab</｜DS");
    outparse_free(&p);
    /* Cut inside the name: no call. */
    parse(&p, &o, "x<" DSML " calls>\n<" DSML " invoke name=\"get_wea", NULL);
    CHECK_STR(str(&p.content), "x");
    CHECK_EQ(p.n_calls, 0);
    outparse_free(&p);
    /* Cut inside the opening marker: the text stays. */
    parse(&p, &o, "x <｜DSM", NULL);
    CHECK_STR(str(&p.content), "x <｜DSM");
    outparse_free(&p);
}

static void test_streaming_holds_back_possible_markers(void)
{
    outparse_opts_t o = {.thinking = true, .tools = true};
    outparse_t p;
    outparse_init(&p, &o);
    outparse_push(&p, "step\n\n</thi", strlen("step\n\n</thi"));
    CHECK_STR(str(&p.reasoning), "step"); /* newlines and "</thi" may be the end marker */
    outparse_push(&p, "nk>Answer <｜DS", strlen("nk>Answer <｜DS"));
    CHECK_STR(str(&p.reasoning), "step");
    CHECK_STR(str(&p.content), "Answer ");
    outparse_push(&p, "X", 1);
    CHECK_STR(str(&p.content), "Answer <｜DSX");
    outparse_free(&p);
}

static void test_json_mode(void)
{
    outparse_opts_t o = {.json = true};
    outparse_t p;
    parse(&p, &o, "Here:\n```json\n{\"a\": [1]}\n```\nDone.", NULL);
    CHECK_STR(str(&p.content), " {\"a\": [1]} ");
    outparse_free(&p);
    parse(&p, &o, "Sure ", "[1, ", "2] tail", NULL);
    CHECK_STR(str(&p.content), " [1, 2] tail");
    outparse_free(&p);
}

/* Any split of the text into pushes gives the same result. */
static void test_result_does_not_depend_on_pieces(void)
{
    char *stop[] = {"END"};
    outparse_opts_t o = {.thinking = true, .tools = true, .stop = stop, .n_stop = 1};
    const char *text = "\nr1\n\n</think>\n\nEN ans <" DSML " calls>\n<" DSML " invoke name=\"f\">\n<" DSML
                       " parameter name=\"k\" string=\"true\">v\nEND</" DSML " parameter>\n</" DSML " invoke>\n</" DSML
                       " calls>";
    outparse_t whole;
    parse(&whole, &o, text, NULL);
    CHECK_STR(str(&whole.content), "EN ans ");
    size_t len = strlen(text);
    for (size_t step = 1; step <= 7; step++) {
        outparse_t p;
        outparse_init(&p, &o);
        for (size_t i = 0; i < len;) {
            size_t n = step;
            while (i + n < len && ((uint8_t)text[i + n] & 0xc0) == 0x80) n++; /* whole characters */
            if (i + n > len) n = len - i;
            outparse_push(&p, text + i, n);
            i += n;
        }
        outparse_finish(&p);
        CHECKF(!strcmp(str(&p.content), str(&whole.content)) && !strcmp(str(&p.reasoning), str(&whole.reasoning)) &&
                   p.n_calls == 1 && !strcmp(str(&p.calls[0].args), str(&whole.calls[0].args)),
               "step %zu differs", step);
        outparse_free(&p);
    }
    outparse_free(&whole);
}

int main(void)
{
    RUN(test_kmp_falls_back_on_mismatch);
    RUN(test_stop_string_ends_output);
    RUN(test_overlapping_stop_strings);
    RUN(test_stop_string_spanning_pushes_is_held_back);
    RUN(test_plain_keeps_chat_markup);
    RUN(test_thinking_splits_reasoning_from_answer);
    RUN(test_answer_drops_leading_newlines_and_stray_think_end);
    RUN(test_continuation_keeps_leading_newlines);
    RUN(test_tool_calls);
    RUN(test_tool_calls_v4_tags_and_escapes);
    RUN(test_tool_calls_in_reasoning_end_it);
    RUN(test_output_starting_inside_tool_calls);
    RUN(test_truncated_tool_call);
    RUN(test_streaming_holds_back_possible_markers);
    RUN(test_json_mode);
    RUN(test_result_does_not_depend_on_pieces);
    return t_finish();
}
