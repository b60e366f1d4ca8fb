/* UTF-8 assembly of token bytes: no character is ever split, ill-formed bytes become U+FFFD
 * one per maximal subpart, as Rust's from_utf8_lossy (HF tokenizers' decode) does. */
#include "testlib.h"
#include "utf8stream.h"

#include <string.h>

#define FFFD "\xef\xbf\xbd"

/* Feeds the pieces one by one; checks what each push releases and the final text. */
static void check_pieces(const char *const *pieces, const char *const *released, size_t n, const char *final)
{
    utf8stream_t s = {0};
    buf_t all = {0};
    for (size_t i = 0; i < n; i++) {
        buf_t out = {0};
        utf8stream_push(&s, (const uint8_t *)pieces[i], strlen(pieces[i]), &out);
        CHECKF(!strcmp(buf_cstr(&out), released[i]), "piece %zu released \"%s\", want \"%s\"", i, buf_cstr(&out),
               released[i]);
        buf_append(&all, out.data, out.len);
        buf_free(&out);
    }
    utf8stream_finish(&s, &all);
    CHECK_STR(buf_cstr(&all), final);
    buf_free(&all);
}

/* Whole-input decoding, one byte at a time and all at once must agree. */
static void check_decode(const char *in, size_t len, const char *want)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        utf8stream_t s = {0};
        buf_t out = {0};
        if (bytewise)
            for (size_t i = 0; i < len; i++) utf8stream_push(&s, (const uint8_t *)in + i, 1, &out);
        else
            utf8stream_push(&s, (const uint8_t *)in, len, &out);
        utf8stream_finish(&s, &out);
        CHECKF(!strcmp(buf_cstr(&out), want), "bytewise=%d: got \"%s\", want \"%s\"", bytewise, buf_cstr(&out), want);
        buf_free(&out);
    }
}

static void test_ascii_passes_through(void)
{
    const char *p[] = {"hello", " ", "world"};
    check_pieces(p, p, 3, "hello world");
}

static void test_character_split_across_tokens(void)
{
    /* 日 = E6 97 A5 in three tokens; 😀 = F0 9F 98 80 in two. */
    const char *p[] = {"a\xe6", "\x97", "\xa5" "b", "\xf0\x9f", "\x98\x80"};
    const char *r[] = {"a", "", "日b", "", "😀"};
    check_pieces(p, r, 5, "a日b😀");
}

static void test_emoji_zwj_sequence(void)
{
    /* 👩‍💻 = U+1F469 U+200D U+1F4BB, each character released as soon as it is whole. */
    const char *p[] = {"\xf0\x9f\x91", "\xa9\xe2\x80", "\x8d\xf0", "\x9f\x92\xbb"};
    const char *r[] = {"", "👩", "\xe2\x80\x8d", "💻"};
    check_pieces(p, r, 4, "👩‍💻");
}

static void test_invalid_bytes_mid_stream(void)
{
    check_decode("a\xff" "b", 3, "a" FFFD "b");
    check_decode("\xc0\xaf", 2, FFFD FFFD);              /* overlong lead: each byte alone */
    check_decode("\xe6\x97" "A", 3, FFFD "A");           /* truncated sequence: one replacement */
    check_decode("\xe0\x80", 2, FFFD FFFD);              /* E0 needs A0..BF next */
    check_decode("\xed\xa0\x80", 3, FFFD FFFD FFFD);     /* surrogate */
    check_decode("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD); /* above U+10FFFF */
    check_decode("\xf0\x9f\x98" "x", 4, FFFD "x");
    check_decode("\x80\x80", 2, FFFD FFFD);              /* stray continuation bytes */
    check_decode("\xe6\x97\xe6\x97\xa5", 5, FFFD "日");  /* the second lead restarts */
}

static void test_incomplete_tail_at_end(void)
{
    const char *p[] = {"ok\xf0\x9f\x98"};
    const char *r[] = {"ok"};
    check_pieces(p, r, 1, "ok" FFFD);
    check_decode("\xe6", 1, FFFD);
}

static void test_replacement_character_is_text(void)
{
    /* A real U+FFFD in the output is an ordinary character, released at once. */
    const char *p[] = {FFFD};
    check_pieces(p, p, 1, FFFD);
}

int main(void)
{
    RUN(test_ascii_passes_through);
    RUN(test_character_split_across_tokens);
    RUN(test_emoji_zwj_sequence);
    RUN(test_invalid_bytes_mid_stream);
    RUN(test_incomplete_tail_at_end);
    RUN(test_replacement_character_is_text);
    return t_finish();
}
