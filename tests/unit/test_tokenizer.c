/* Tokenizer unit cases: the V4 tokenizer.json against ids HF tokenizers gives (hard-coded
 * from tokenizers 0.23.3), byte-level round trips, bad input, and tokenizer.json files that
 * must be refused with an error naming what is unsupported. The corpus-wide comparison with
 * HF is tests/py/test_tokenizer_hf.py. */
#include "testlib.h"
#include "tokenizer.h"
#include "util.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tokenizer_t *tok;

/* ---- helpers ------------------------------------------------------------------------- */

static bool ids_equal(const ids_t *got, const uint32_t *want, size_t n)
{
    if (got->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (got->v[i] != want[i]) return false;
    return true;
}

static void print_ids(const char *label, const uint32_t *v, size_t n)
{
    fprintf(stderr, "    %s:", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %u", v[i]);
    fputc('\n', stderr);
}

/* Encodes text in one mode and compares with HF's ids. */
static void expect_ids(const char *text, bool added, const uint32_t *want, size_t n)
{
    ids_t ids = {0};
    int rc = added ? tokenizer_encode_with_added(tok, text, strlen(text), &ids) : tokenizer_encode(tok, text, strlen(text), &ids);
    CHECK_EQ(rc, 0);
    bool same = ids_equal(&ids, want, n);
    CHECKF(same, "ids of \"%s\" (%s)", text, added ? "with added tokens" : "plain");
    if (!same) {
        print_ids("got ", ids.v, ids.n);
        print_ids("want", want, n);
    }
    ids_free(&ids);
}

#define EXPECT_PLAIN(text, ...) do { const uint32_t w_[] = {__VA_ARGS__}; expect_ids(text, false, w_, DI_ARRAY_LEN(w_)); } while (0)
#define EXPECT_ADDED(text, ...) do { const uint32_t w_[] = {__VA_ARGS__}; expect_ids(text, true, w_, DI_ARRAY_LEN(w_)); } while (0)
#define EXPECT_BOTH(text, ...) do { EXPECT_PLAIN(text, __VA_ARGS__); EXPECT_ADDED(text, __VA_ARGS__); } while (0)

/* decode(encode(text)) == text, in both modes. */
static bool round_trips(const char *text, size_t len)
{
    bool ok = true;
    for (int added = 0; added < 2; added++) {
        ids_t ids = {0};
        buf_t back = {0};
        int rc = added ? tokenizer_encode_with_added(tok, text, len, &ids) : tokenizer_encode(tok, text, len, &ids);
        ok = ok && rc == 0 && tokenizer_decode(tok, ids.v, ids.n, &back) == 0 && back.len == len &&
             (len == 0 || !memcmp(back.data, text, len));
        ids_free(&ids);
        buf_free(&back);
    }
    return ok;
}

/* ---- the V4 tokenizer ---------------------------------------------------------------- */

static void test_load(void)
{
    CHECK(tok != NULL);
    CHECK_EQ(tokenizer_vocab_size(tok), 129280);
}

static void test_empty(void)
{
    ids_t ids = {0};
    CHECK_EQ(tokenizer_encode(tok, "", 0, &ids), 0);
    CHECK_EQ(tokenizer_encode_with_added(tok, "", 0, &ids), 0);
    CHECK_EQ(ids.n, 0);
    buf_t out = {0};
    CHECK_EQ(tokenizer_decode(tok, NULL, 0, &out), 0);
    CHECK_EQ(out.len, 0);
    ids_free(&ids);
    buf_free(&out);
}

/* Every byte alone: one token (its byte-level symbol), decoding to that byte; the bytes that
 * are not UTF-8 on their own are refused. */
static void test_single_bytes(void)
{
    EXPECT_BOTH("a", 67);
    EXPECT_BOTH(" ", 223);
    EXPECT_BOTH("\n", 201);
    EXPECT_BOTH("\x7f", 224);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        ids_t ids = {0};
        int rc = tokenizer_encode(tok, &c, 1, &ids);
        if (b >= 0x80) {
            CHECKF(rc == -1 && ids.n == 0, "lone byte 0x%02x refused", b);
        } else {
            size_t len = 0;
            const uint8_t *p = rc == 0 && ids.n == 1 ? tokenizer_token_bytes(tok, ids.v[0], &len) : NULL;
            CHECKF(p && len == 1 && p[0] == b, "byte 0x%02x is one token that decodes to itself", b);
        }
        ids_free(&ids);
    }
}

static void test_scripts(void)
{
    EXPECT_BOTH("Hello, world! It's 2024.", 19923, 14, 2058, 3, 983, 734, 223, 939, 22, 16);
    EXPECT_BOTH("The quick brown fox jumps over the lazy dog.", 671, 4787, 13769, 46012, 54994, 1060, 270, 41638, 6397, 16);
    EXPECT_BOTH("你好，世界！今天天气很好。", 30594, 303, 3427, 1175, 5237, 16652, 12210, 320);
    EXPECT_BOTH("日本語のテキストです。カタカナ", 88768, 1576, 17383, 20367, 24552, 8262, 320, 15961, 11767, 15961, 27071);
    EXPECT_BOTH("안녕하세요, 세계!", 31404, 11939, 246, 4567, 73527, 14, 76878, 3);
    EXPECT_BOTH("مرحبا بالعالم", 10393, 2212, 53067, 9254, 1183, 14059);
    EXPECT_BOTH("Привет, мир!", 24797, 8919, 14, 74779, 3);
    EXPECT_BOTH("e\u0301 cafe\u0301", 71, 17793, 69292, 17793);
    EXPECT_BOTH("👨‍👩‍👧‍👦🇺🇸👍🏽", 25730, 104, 46088, 25730, 105, 46088, 25730, 103, 46088, 25730, 102, 43754, 121, 43754,
                119, 92526, 40965, 124);
}

static void test_digits_and_whitespace(void)
{
    EXPECT_BOTH("12345678", 6895, 18009, 2597); /* \p{N}{1,3}: 123 456 78 */
    EXPECT_BOTH("x = 1\r\n\tif (y) {\n\t\treturn;\n}\n", 90, 438, 223, 19, 204, 201, 5733, 343, 91, 11, 875, 200, 5562, 510, 1778);
    EXPECT_BOTH("a  b\t\tc\n\n\nd   ", 67, 223, 291, 200, 28544, 6328, 70, 361);
}

/* Characters assigned after PCRE2's Unicode version: HF's engine sees a symbol (U+1FA77, an
 * emoji of Unicode 15) and letters (U+11380, U+31350, Unicode 16) where plain PCRE2 sees
 * unassigned code points and would split differently. */
static void test_recent_unicode(void)
{
    EXPECT_BOTH(" \U0001FA77x", 7351, 105, 118, 90);
    EXPECT_BOTH("a\U00011380b \U00031350", 67, 175, 242, 239, 225, 68, 86387, 112, 238, 241);
}

/* Added-token spellings: plain text in tokenizer_encode, their ids with added tokens. */
static void test_added_tokens(void)
{
    EXPECT_PLAIN("<think>hi</think>", 30, 37947, 32, 6366, 1718, 37947, 32);
    EXPECT_ADDED("<think>hi</think>", 128821, 6366, 128822);
    EXPECT_PLAIN("<｜User｜>x<｜Assistant｜>", 30, 28217, 6756, 28217, 32, 90, 30, 28217, 88031, 28217, 32);
    EXPECT_ADDED("<｜User｜>x<｜Assistant｜>", 128803, 90, 128804);
    EXPECT_PLAIN("a<｜begin▁of▁sentence｜>b", 67, 30, 28217, 8277, 5487, 226, 2154, 5487, 226, 85, 51015, 28217, 32, 68);
    EXPECT_ADDED("a<｜begin▁of▁sentence｜>b", 67, 0, 68);
    EXPECT_ADDED("<think>", 128821);
    EXPECT_ADDED("<think></think><think>", 128821, 128822, 128821);
    EXPECT_ADDED("<thin", 100720, 261);
    CHECK_EQ(tokenizer_added_id(tok, "<think>", 7), 128821);
    CHECK_EQ(tokenizer_added_id(tok, "<｜begin▁of▁sentence｜>", strlen("<｜begin▁of▁sentence｜>")), 0);
    CHECK_EQ(tokenizer_added_id(tok, "<｜image2｜>", strlen("<｜image2｜>")), 129264);
    CHECK_EQ(tokenizer_added_id(tok, "<thin", 5), -1);
    CHECK_EQ(tokenizer_added_id(tok, "", 0), -1);
    CHECK(tokenizer_is_special(tok, 0));
    CHECK(tokenizer_is_special(tok, 1));
    CHECK(!tokenizer_is_special(tok, 128821));
    CHECK(!tokenizer_is_special(tok, 67));
    size_t len = 0;
    const uint8_t *p = tokenizer_token_bytes(tok, 128803, &len);
    CHECK(p && len == strlen("<｜User｜>") && !memcmp(p, "<｜User｜>", len));
}

/* Every token of the vocabulary decodes to bytes; those bytes, when valid UTF-8, encode and
 * decode back to themselves. */
static void test_decode_every_id(void)
{
    size_t missing = 0, bad = 0, checked = 0;
    for (uint32_t id = 0; id < tokenizer_vocab_size(tok); id++) {
        size_t len;
        const uint8_t *p = tokenizer_token_bytes(tok, id, &len);
        if (!p || !len) {
            missing++;
            continue;
        }
        char *copy = xstrndup((const char *)p, len);
        ids_t ids = {0};
        if (tokenizer_encode(tok, copy, len, &ids) == 0) {
            checked++;
            if (!round_trips(copy, len)) bad++;
        }
        ids_free(&ids);
        free(copy);
    }
    CHECK_EQ(missing, 0);
    CHECK_EQ(bad, 0);
    CHECKF(checked > 120000, "%zu tokens checked", checked);
}

static void test_out_of_range_ids(void)
{
    size_t len = 7;
    CHECK(tokenizer_token_bytes(tok, 129280, &len) == NULL);
    CHECK(tokenizer_token_bytes(tok, UINT32_MAX, &len) == NULL);
    CHECK(!tokenizer_is_special(tok, UINT32_MAX));
    buf_t out = {0};
    buf_puts(&out, "kept");
    const uint32_t ids[] = {67, 129280, 68};
    CHECK_EQ(tokenizer_decode(tok, ids, 3, &out), -1);
    CHECK(out.len == 4 && !memcmp(out.data, "kept", 4));
    buf_free(&out);
}

static void test_invalid_utf8(void)
{
    const char *bad[] = {"\xff", "ab\xc0\x80", "\xed\xa0\x80", "x\xe4\xb8", "\xf4\x90\x80\x80", "ok\x80"};
    for (size_t i = 0; i < DI_ARRAY_LEN(bad); i++) {
        ids_t ids = {0};
        ids_push(&ids, 5);
        CHECKF(tokenizer_encode(tok, bad[i], strlen(bad[i]), &ids) == -1, "invalid UTF-8 #%zu refused", i);
        CHECKF(tokenizer_encode_with_added(tok, bad[i], strlen(bad[i]), &ids) == -1, "invalid UTF-8 #%zu refused (added)", i);
        CHECK(ids.n == 1 && ids.v[0] == 5);
        ids_free(&ids);
    }
    /* NUL is valid UTF-8 and a byte like any other. */
    ids_t ids = {0};
    CHECK_EQ(tokenizer_encode(tok, "a\0b", 3, &ids), 0);
    CHECK(ids.n == 3 && ids.v[1] == 191);
    ids_free(&ids);
}

/* Long words and runs: the merge loop stays fast on them and the text round-trips. */
static void test_long_inputs(void)
{
    size_t n = 1 << 20;
    char *text = xmalloc(n * 3 + 1);
    const char *fills[] = {" ", "a", "\n", "中"};
    for (size_t f = 0; f < DI_ARRAY_LEN(fills); f++) {
        size_t k = strlen(fills[f]), len = 0;
        for (size_t i = 0; i < n / k; i++, len += k) memcpy(text + len, fills[f], k);
        uint64_t t0 = now_ns();
        CHECKF(round_trips(text, len), "a run of %zu bytes of \"%s\" round-trips", len, fills[f]);
        double s = (double)(now_ns() - t0) / 1e9;
        CHECKF(s < 5, "a run of \"%s\" took %.2f s", fills[f], s);
    }
    free(text);
}

/* 10 MiB of spaces needs more backtracking steps than PCRE2's default budget allows (HF's
 * Oniguruma panics on it); it is valid text and must encode. */
static void test_long_whitespace_run(void)
{
    size_t n = 10u << 20;
    char *text = xmalloc(n);
    memset(text, ' ', n);
    ids_t ids = {0};
    buf_t back = {0};
    CHECK_EQ(tokenizer_encode(tok, text, n, &ids), 0);
    CHECK_EQ(tokenizer_decode(tok, ids.v, ids.n, &back), 0);
    CHECK(back.len == n && !memcmp(back.data, text, n));
    ids_free(&ids);
    buf_free(&back);
    free(text);
}

typedef struct {
    const char *text;
    size_t len;
    ids_t ids;
} thread_job_t;

static void *encode_thread(void *p)
{
    thread_job_t *job = p;
    for (int i = 0; i < 20; i++) {
        job->ids.n = 0;
        tokenizer_encode_with_added(tok, job->text, job->len, &job->ids);
    }
    return NULL;
}

static void test_threads(void)
{
    buf_t text = {0};
    for (int i = 0; i < 2000; i++) buf_printf(&text, "word%d 漢字%d <think> emoji😀 %d\n", i % 97, i, i * 7919);
    ids_t want = {0};
    CHECK_EQ(tokenizer_encode_with_added(tok, (const char *)text.data, text.len, &want), 0);
    thread_job_t jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job_t){(const char *)text.data, text.len, {0}};
        pthread_create(&th[i], NULL, encode_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(ids_equal(&jobs[i].ids, want.v, want.n), "thread %d gets the same ids", i);
        ids_free(&jobs[i].ids);
    }
    ids_free(&want);
    buf_free(&text);
}

static void test_default_path(void)
{
    setenv("DI_TOKENIZER", "/some/file.json", 1);
    CHECK_STR(tokenizer_default_path(), "/some/file.json");
    setenv("DI_TOKENIZER", "/tmp", 1);
    CHECK_STR(tokenizer_default_path(), "/tmp/tokenizer.json");
    unsetenv("DI_TOKENIZER");
    CHECK(strstr(tokenizer_default_path(), "data/tokenizer/tokenizer.json") != NULL);
}

/* ---- tokenizer.json files: a tiny valid one, and variants that must be refused -------- */

static char tmp_path[64];

static void put_byte_level_char(char *out, int b)
{
    unsigned cp = b <= 0x20 ? 0x100u + (unsigned)b : (b >= 0x7f && b <= 0xa0) ? 0x100u + 33 + (unsigned)(b - 0x7f) : b == 0xad ? 0x143u : (unsigned)b;
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
}

/* Bytes as ids 0..255, "ab" = 256, "abc" = 257; added "<x>" = 258 (special, matched on the raw
 * text), "<y>" = 259 and "a<x" = 260 (matched on the normalized text, after the raw ones). */
static json_t *tiny_spec(void)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        put_byte_level_char(s, b);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "abc", json_integer(257));
    return json_pack("{s:s, s:n, s:n, s:{s:s, s:[]}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
                     " s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:[s, s]},"
                     " s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b, s:b, s:b},"
                     " {s:i, s:s, s:b, s:b, s:b, s:b, s:b}]}",
                     "version", "1.0", "truncation", "padding",
                     "normalizer", "type", "Sequence", "normalizers",
                     "pre_tokenizer", "type", "Sequence", "pretokenizers",
                     "type", "Split", "pattern", "Regex", "\\s+|\\S+", "behavior", "Isolated", "invert", 0,
                     "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0,
                     "post_processor",
                     "decoder", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1,
                     "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                     "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", "a b", "ab c",
                     "added_tokens",
                     "id", 258, "content", "<x>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1,
                     "id", 259, "content", "<y>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 1, "special", 0,
                     "id", 260, "content", "a<x", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 1, "special", 0);
}

static tokenizer_t *load_spec(json_t *spec, char *err, size_t errlen)
{
    CHECK(json_dump_file(spec, tmp_path, 0) == 0);
    json_decref(spec);
    return tokenizer_load(tmp_path, err, errlen);
}

static void test_tiny_tokenizer(void)
{
    char err[1024] = "";
    tokenizer_t *t = load_spec(tiny_spec(), err, sizeof err);
    CHECKF(t != NULL, "tiny tokenizer loads: %s", err);
    if (!t) return;
    CHECK_EQ(tokenizer_vocab_size(t), 261);
    ids_t ids = {0};
    CHECK_EQ(tokenizer_encode_with_added(t, "abc ab<x>a<y>", 13, &ids), 0);
    const uint32_t want[] = {257, 32, 256, 258, 'a', 259};
    CHECK(ids_equal(&ids, want, DI_ARRAY_LEN(want)));
    /* HF's two passes: the raw "<x>" wins over the normalized "a<x" that starts earlier. */
    ids.n = 0;
    CHECK_EQ(tokenizer_encode_with_added(t, "a<x>", 4, &ids), 0);
    const uint32_t raw_first[] = {'a', 258};
    CHECK(ids_equal(&ids, raw_first, 2));
    ids.n = 0;
    CHECK_EQ(tokenizer_encode_with_added(t, "a<x", 3, &ids), 0);
    CHECK(ids.n == 1 && ids.v[0] == 260);
    ids.n = 0;
    CHECK_EQ(tokenizer_encode(t, "<x>", 3, &ids), 0);
    const uint32_t plain[] = {'<', 'x', '>'};
    CHECK(ids_equal(&ids, plain, 3));
    CHECK(tokenizer_is_special(t, 258) && !tokenizer_is_special(t, 259));
    ids_free(&ids);
    tokenizer_free(t);
}

/* Each mutation of the tiny file must be refused with an error containing `needle`. */
static void expect_refused(const char *what, json_t *spec, const char *needle)
{
    char err[1024] = "";
    tokenizer_t *t = load_spec(spec, err, sizeof err);
    CHECKF(t == NULL, "%s is refused", what);
    CHECKF(strstr(err, needle) != NULL, "%s: error \"%s\" names \"%s\"", what, err, needle);
    tokenizer_free(t);
}

static json_t *pre_split(json_t *spec)
{
    return json_array_get(json_object_get(json_object_get(spec, "pre_tokenizer"), "pretokenizers"), 0);
}

static json_t *with_split_regex(const char *regex)
{
    json_t *s = tiny_spec();
    json_object_set_new(json_object_get(pre_split(s), "pattern"), "Regex", json_string(regex));
    return s;
}

static void test_refused_features(void)
{
    json_t *s;
    s = tiny_spec();
    json_object_set_new(s, "normalizer", json_pack("{s:s}", "type", "NFC"));
    expect_refused("an NFC normalizer", s, "normalizer NFC");
    s = tiny_spec();
    json_object_set_new(pre_split(s), "behavior", json_string("Removed"));
    expect_refused("Split Removed", s, "Removed");
    s = tiny_spec();
    json_object_set_new(pre_split(s), "invert", json_true());
    expect_refused("Split invert", s, "invert");
    expect_refused("\\h (hex digit in Oniguruma)", with_split_regex("\\h+"), "\\h");
    expect_refused("\\w", with_split_regex("\\w+|\\s+"), "\\w");
    expect_refused("a regex matching empty", with_split_regex("a*"), "empty");
    expect_refused("a bad regex", with_split_regex("(a"), "regex");
    expect_refused("POSIX brackets", with_split_regex("[[:alpha:]]+"), "POSIX");
    expect_refused("inline options", with_split_regex("(?i)a"), "inline options");
    expect_refused("a script property", with_split_regex("\\p{Han}+"), "Han");
    s = tiny_spec();
    json_object_set_new(json_object_get(s, "pre_tokenizer"), "pretokenizers", json_pack("[{s:s}]", "type", "Whitespace"));
    expect_refused("a Whitespace pre-tokenizer", s, "Whitespace");
    s = tiny_spec();
    json_object_set_new(json_array_get(json_object_get(json_object_get(s, "pre_tokenizer"), "pretokenizers"), 1), "use_regex", json_true());
    expect_refused("ByteLevel use_regex", s, "use_regex");
    s = tiny_spec();
    json_object_set_new(json_object_get(s, "model"), "dropout", json_real(0.1));
    expect_refused("BPE dropout", s, "dropout");
    s = tiny_spec();
    json_object_set_new(json_object_get(s, "model"), "unk_token", json_string("a"));
    expect_refused("an unk token", s, "unk_token");
    s = tiny_spec();
    json_object_set_new(json_object_get(s, "model"), "byte_fallback", json_true());
    expect_refused("byte fallback", s, "byte_fallback");
    s = tiny_spec();
    json_object_set_new(json_object_get(s, "model"), "type", json_string("WordPiece"));
    expect_refused("a WordPiece model", s, "WordPiece");
    s = tiny_spec();
    json_object_set_new(s, "decoder", json_null());
    expect_refused("no decoder", s, "decoder");
    s = tiny_spec();
    json_object_set_new(json_array_get(json_object_get(s, "added_tokens"), 0), "lstrip", json_true());
    expect_refused("an lstrip added token", s, "lstrip");
    s = tiny_spec();
    json_object_set_new(json_array_get(json_object_get(s, "added_tokens"), 1), "content", json_string("<x>"));
    expect_refused("an added token listed twice", s, "twice");
    s = tiny_spec();
    json_object_set_new(json_array_get(json_object_get(s, "added_tokens"), 0), "id", json_integer(256));
    expect_refused("an added token on a vocabulary id", s, "given to both");
    s = tiny_spec();
    json_object_set_new(json_array_get(json_object_get(s, "added_tokens"), 0), "id", json_integer(-3));
    expect_refused("a negative id", s, "no id");
    s = tiny_spec();
    json_array_append_new(json_object_get(json_object_get(s, "model"), "merges"), json_string("ab x"));
    expect_refused("a merge into a token not in the vocabulary", s, "not in the vocabulary");
    s = tiny_spec();
    json_array_append_new(json_object_get(json_object_get(s, "model"), "merges"), json_string("a b"));
    expect_refused("a merge listed twice", s, "twice");
    s = tiny_spec();
    json_object_del(json_object_get(json_object_get(s, "model"), "vocab"), "a");
    expect_refused("a missing byte symbol", s, "byte 0x61");
    s = tiny_spec();
    json_object_set_new(s, "truncation", json_pack("{s:i}", "max_length", 5));
    expect_refused("truncation", s, "truncation");
}

static void test_missing_and_corrupt_files(void)
{
    char err[1024] = "";
    CHECK(tokenizer_load("/nonexistent/tokenizer.json", err, sizeof err) == NULL);
    CHECKF(strstr(err, "/nonexistent/tokenizer.json") != NULL, "error names the path: %s", err);
    CHECK(tokenizer_load("/tmp", err, sizeof err) == NULL);
    CHECKF(strstr(err, "regular file") != NULL, "a directory is refused: %s", err);

    size_t size;
    char *whole = read_file(t_data_path("tokenizer/tokenizer.json"), &size);
    CHECK(whole != NULL);
    if (!whole) return;
    const size_t cuts[] = {0, 1, 100, 4096, 1000000, 5000000};
    for (size_t i = 0; i < DI_ARRAY_LEN(cuts); i++) {
        FILE *f = fopen(tmp_path, "wb");
        fwrite(whole, 1, cuts[i] < size ? cuts[i] : size / 2, f);
        fclose(f);
        CHECKF(tokenizer_load(tmp_path, err, sizeof err) == NULL, "a file cut at %zu bytes is refused", cuts[i]);
        CHECKF(strstr(err, "invalid JSON") != NULL, "cut at %zu: %s", cuts[i], err);
    }
    free(whole);
    FILE *f = fopen(tmp_path, "wb");
    fputs("[1, 2, 3]", f);
    fclose(f);
    CHECK(tokenizer_load(tmp_path, err, sizeof err) == NULL);
    CHECKF(strstr(err, "top level") != NULL, "%s", err);
}

int main(void)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/test_tokenizer_%d.json", (int)getpid());
    char err[1024] = "";
    tok = tokenizer_load(t_data_path("tokenizer/tokenizer.json"), err, sizeof err);
    if (!tok) {
        fprintf(stderr, "cannot load the V4 tokenizer (run make data): %s\n", err);
        RUN(test_load);
        return t_finish();
    }
    RUN(test_load);
    RUN(test_empty);
    RUN(test_single_bytes);
    RUN(test_scripts);
    RUN(test_digits_and_whitespace);
    RUN(test_recent_unicode);
    RUN(test_added_tokens);
    RUN(test_decode_every_id);
    RUN(test_out_of_range_ids);
    RUN(test_invalid_utf8);
    RUN(test_long_inputs);
    RUN(test_long_whitespace_run);
    RUN(test_threads);
    RUN(test_default_path);
    RUN(test_tiny_tokenizer);
    RUN(test_refused_features);
    RUN(test_missing_and_corrupt_files);
    tokenizer_free(tok);
    unlink(tmp_path);
    return t_finish();
}
