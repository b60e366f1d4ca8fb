/* Frames: every type round-trips byte-exactly; malformed input of every kind is refused
 * with a message naming what was wrong, never read out of bounds. */
#include "frame.h"
#include "testlib.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

static void fill_request(frame_t *f)
{
    frame_init(f, FRAME_REQUEST);
    f->id = xstrdup("req-1");
    f->seq = 7;
    static const uint32_t prompt[] = {0, 128803, 1234, 129279};
    f->n_tokens = 4;
    f->tokens = xmalloc(sizeof prompt);
    memcpy(f->tokens, prompt, sizeof prompt);
    f->params.max_tokens = 64;
    f->params.temperature = 0.7;
    f->params.top_p = 0.95;
    f->params.top_k = 40;
    f->params.has_seed = true;
    f->params.seed = 1ull << 62;
    f->constraint.kind = CONSTRAINT_REGEX;
    f->constraint.text = xstrdup("[a-z]+");
    f->meta.shape = SHAPE_BATCH;
    f->meta.custom_id = xstrdup("custom-\xe4\xb8\xad");
    f->meta.thinking = true;
    f->meta.n_stop = 2;
    f->meta.stop = xmalloc(2 * sizeof(char *));
    f->meta.stop[0] = xstrdup("END");
    f->meta.stop[1] = xstrdup("\n\n");
    f->meta.prompt_tokens = 4;
    f->has_meta = true;
    frame_add_hop(f, "di-tokenize", 100, 200);
}

/* encode -> decode -> encode gives the same bytes. */
static bool round_trips(const frame_t *f, frame_t *back)
{
    buf_t a = {0}, b = {0};
    frame_encode(f, &a);
    char err[256];
    int rc = frame_decode(a.data, a.len, back, NULL, NULL, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "    decode failed: %s\n", err);
        buf_free(&a);
        return false;
    }
    frame_encode(back, &b);
    bool same = a.len == b.len && !memcmp(a.data, b.data, a.len);
    buf_free(&a);
    buf_free(&b);
    return same;
}

static void test_request_round_trip(void)
{
    frame_t f, g;
    fill_request(&f);
    CHECK(round_trips(&f, &g));
    CHECK_EQ(g.type, FRAME_REQUEST);
    CHECK_STR(g.id, "req-1");
    CHECK_EQ(g.seq, 7);
    CHECK_EQ(g.n_tokens, 4);
    CHECK_EQ(g.tokens[3], 129279);
    CHECK_EQ(g.params.max_tokens, 64);
    CHECK(g.params.temperature == 0.7);
    CHECK_EQ(g.params.top_k, 40);
    CHECK(g.params.min_p < 0);
    CHECK_EQ(g.params.seed, 1ull << 62);
    CHECK_EQ(g.constraint.kind, CONSTRAINT_REGEX);
    CHECK_STR(g.constraint.text, "[a-z]+");
    CHECK_EQ(g.meta.shape, SHAPE_BATCH);
    CHECK_STR(g.meta.custom_id, "custom-\xe4\xb8\xad");
    CHECK(g.meta.thinking);
    CHECK_EQ(g.meta.n_stop, 2);
    CHECK_STR(g.meta.stop[1], "\n\n");
    CHECK_EQ(g.n_hops, 1);
    CHECK_STR(g.hops[0].stage, "di-tokenize");
    CHECK_EQ(g.hops[0].out_us, 200);
    frame_free(&f);
    frame_free(&g);
}

static void test_state_round_trip(void)
{
    frame_t f, g;
    fill_request(&f);
    f.type = FRAME_STATE;
    f.tokens[0] = 77;
    f.n_tokens = 1;
    f.state_len = 1000;
    f.state = xmalloc(f.state_len);
    for (uint64_t i = 0; i < f.state_len; i++) f.state[i] = (uint8_t)(i * 7);
    CHECK(round_trips(&f, &g));
    CHECK_EQ(g.type, FRAME_STATE);
    CHECK_EQ(g.n_tokens, 1);
    CHECK_EQ(g.tokens[0], 77);
    CHECK_EQ(g.state_len, 1000);
    CHECK(g.state && !memcmp(g.state, f.state, 1000));
    CHECK(g.has_meta && g.meta.thinking);
    CHECK_EQ(g.constraint.kind, CONSTRAINT_REGEX);
    frame_free(&f);
    frame_free(&g);
}

static void test_other_types_round_trip(void)
{
    frame_t f, g;
    frame_init(&f, FRAME_TOKENS);
    f.id = xstrdup("a");
    f.n_tokens = 2;
    f.tokens = xcalloc(2, sizeof *f.tokens);
    f.tokens[1] = 5;
    f.logprobs = xcalloc(2, sizeof *f.logprobs);
    f.logprobs[1].logprob = -0.5f;
    f.logprobs[1].n_top = 2;
    f.logprobs[1].top_ids[1] = 9;
    f.logprobs[1].top_logprobs[1] = -3.25f;
    CHECK(round_trips(&f, &g));
    CHECK(g.logprobs && g.logprobs[1].top_ids[1] == 9 && g.logprobs[1].top_logprobs[1] == -3.25f);
    frame_free(&f);
    frame_free(&g);

    frame_init(&f, FRAME_DONE);
    f.id = xstrdup("a");
    f.finish_reason = xstrdup("length");
    f.prompt_tokens = 10;
    f.completion_tokens = 3;
    CHECK(round_trips(&f, &g));
    CHECK_STR(g.finish_reason, "length");
    CHECK_EQ(g.completion_tokens, 3);
    frame_free(&f);
    frame_free(&g);

    frame_make_error(&f, NULL, 3, "di-tokenize", "bad_request", "line 4: not JSON");
    CHECK(round_trips(&f, &g));
    CHECK(g.id == NULL);
    CHECK_STR(g.message, "line 4: not JSON");
    frame_free(&f);
    frame_free(&g);

    frame_init(&f, FRAME_EOS);
    f.eos.sender = xstrdup("s");
    f.eos.origin = xstrdup("o");
    f.eos.announced = 2;
    f.eos.served = 2;
    f.eos.n_ids = 2;
    f.eos.ids = xmalloc(2 * sizeof(char *));
    f.eos.ids[0] = xstrdup("x");
    f.eos.ids[1] = xstrdup("y");
    CHECK(round_trips(&f, &g));
    CHECK_EQ(g.eos.n_ids, 2);
    CHECK_STR(g.eos.ids[1], "y");
    frame_free(&f);
    frame_free(&g);
}

/* ---- hand-built frames for the error paths ---- */

static int to_buf(void *data, const char *p, size_t n)
{
    buf_append(data, p, n);
    return 0;
}

static void key(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Decodes b and checks the error message contains want. */
static void expect_error(buf_t *b, const char *want)
{
    frame_t f;
    char err[256] = "";
    int rc = frame_decode(b->data, b->len, &f, NULL, NULL, err, sizeof err);
    CHECKF(rc == -1 && strstr(err, want), "want error containing '%s', got rc=%d '%s'", want, rc, err);
    buf_free(b);
}

static void head(msgpack_packer *pk, size_t fields, const char *type)
{
    msgpack_pack_map(pk, fields);
    key(pk, "v");
    msgpack_pack_uint8(pk, 1);
    key(pk, "type");
    key(pk, type);
}

static void test_missing_and_wrong_fields(void)
{
    buf_t b = {0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, to_buf);

    head(&pk, 3, "request");
    key(&pk, "id");
    key(&pk, "r");
    expect_error(&b, "required field 'prompt'");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 4, "state");
    key(&pk, "id");
    key(&pk, "r");
    key(&pk, "tokens");
    msgpack_pack_array(&pk, 0);
    expect_error(&b, "required field 'state'");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 2, "teleport");
    expect_error(&b, "unknown frame type 'teleport'");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 4, "tokens");
    key(&pk, "id");
    key(&pk, "r");
    key(&pk, "tokens");
    key(&pk, "oops");
    expect_error(&b, "field 'tokens': expected array");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 4, "done");
    key(&pk, "id");
    msgpack_pack_int(&pk, 5);
    key(&pk, "finish_reason");
    key(&pk, "stop");
    expect_error(&b, "field 'id': expected string");

    msgpack_packer_init(&pk, &b, to_buf);
    msgpack_pack_map(&pk, 2);
    key(&pk, "v");
    msgpack_pack_uint8(&pk, 9);
    key(&pk, "type");
    key(&pk, "done");
    expect_error(&b, "unsupported protocol version 9");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 4, "request");
    key(&pk, "id");
    key(&pk, "r");
    key(&pk, "id");
    key(&pk, "r");
    expect_error(&b, "field 'id': duplicate");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 4, "request");
    key(&pk, "id");
    msgpack_pack_str(&pk, 2);
    msgpack_pack_str_body(&pk, "\xc3\x28", 2);
    key(&pk, "prompt");
    msgpack_pack_array(&pk, 0);
    expect_error(&b, "not valid UTF-8");

    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 5, "request");
    key(&pk, "id");
    key(&pk, "r");
    key(&pk, "prompt");
    msgpack_pack_array(&pk, 0);
    key(&pk, "params");
    msgpack_pack_map(&pk, 1);
    key(&pk, "top_p");
    msgpack_pack_double(&pk, 1.5);
    expect_error(&b, "field 'params.top_p'");

    msgpack_packer_init(&pk, &b, to_buf);
    msgpack_pack_array(&pk, 0);
    expect_error(&b, "must be a msgpack map");
}

static void test_bad_frame_keeps_id(void)
{
    buf_t b = {0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, to_buf);
    head(&pk, 5, "request");
    key(&pk, "id");
    key(&pk, "keep-me");
    key(&pk, "seq");
    msgpack_pack_uint8(&pk, 42);
    key(&pk, "prompt");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, -3);
    frame_t f;
    char err[256], *id = NULL;
    uint64_t seq = 0;
    CHECK_EQ(frame_decode(b.data, b.len, &f, &id, &seq, err, sizeof err), -1);
    CHECK(id && !strcmp(id, "keep-me"));
    CHECK_EQ(seq, 42);
    CHECK(strstr(err, "prompt") != NULL);
    free(id);
    buf_free(&b);
}

static void test_truncation_and_wire_length(void)
{
    frame_t f;
    fill_request(&f);
    buf_t b = {0};
    frame_encode(&f, &b);
    frame_free(&f);
    char err[256];
    CHECK_EQ(frame_wire_length(b.data, b.len, err, sizeof err), (int64_t)b.len);
    int wrong = 0;
    for (size_t n = 0; n < b.len; n++) {
        if (frame_wire_length(b.data, n, err, sizeof err) != 0) wrong++;
        frame_t g;
        if (frame_decode(b.data, n, &g, NULL, NULL, err, sizeof err) != -1) wrong++;
    }
    CHECK_EQ(wrong, 0);
    /* Trailing bytes after a complete frame are refused by the decoder. */
    buf_putc(&b, 0xc0);
    frame_t g;
    CHECK_EQ(frame_decode(b.data, b.len, &g, NULL, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "trailing") != NULL);
    buf_free(&b);
}

static void test_hostile_sizes(void)
{
    char err[256];
    /* array32 claiming 2^31 elements in a 5-byte message: need-more on a stream, error as a message */
    const uint8_t huge[] = {0xdd, 0x80, 0x00, 0x00, 0x00};
    CHECK_EQ(frame_wire_length(huge, sizeof huge, err, sizeof err), 0);
    frame_t f;
    CHECK_EQ(frame_decode(huge, sizeof huge, &f, NULL, NULL, err, sizeof err), -1);
    /* str32 of 4 GiB */
    const uint8_t str[] = {0x81, 0xa1, 'v', 0xdb, 0xff, 0xff, 0xff, 0xff};
    CHECK_EQ(frame_decode(str, sizeof str, &f, NULL, NULL, err, sizeof err), -1);
    /* nesting deeper than the limit */
    uint8_t deep[100];
    memset(deep, 0x91, sizeof deep);
    deep[99] = 0xc0;
    CHECK_EQ(frame_wire_length(deep, sizeof deep, err, sizeof err), -1);
    CHECK(strstr(err, "nested") != NULL);
    /* the never-used byte */
    const uint8_t c1[] = {0xc1};
    CHECK_EQ(frame_wire_length(c1, 1, err, sizeof err), -1);
}

int main(void)
{
    RUN(test_request_round_trip);
    RUN(test_state_round_trip);
    RUN(test_other_types_round_trip);
    RUN(test_missing_and_wrong_fields);
    RUN(test_bad_frame_keeps_id);
    RUN(test_truncation_and_wire_length);
    RUN(test_hostile_sizes);
    return t_finish();
}
