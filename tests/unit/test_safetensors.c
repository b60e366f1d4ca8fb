/* Safetensors reader: valid single and sharded files, truncation, hostile headers and
 * indexes. Every rejection must name the problem. */
#include "safetensors.h"
#include "safetensors_write.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[512];

/* An image: 8-byte length, the header text, then `data` bytes of 0..255. */
static uint8_t *image(const char *header, size_t data, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data;
    uint8_t *p = malloc(*len);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(p + 8, header, h);
    for (size_t i = 0; i < data; i++) p[8 + h + i] = (uint8_t)i;
    return p;
}

static const char *VALID =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
    "\"s\":{\"dtype\":\"F8_E8M0\",\"shape\":[1,1],\"data_offsets\":[28,29]},"
    "\"z\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[29,29]}}";

static void test_valid_image(void) {
    size_t len;
    uint8_t *img = image(VALID, 29, &len);
    st_archive_t *a = st_from_memory(img, len, "mem", err, sizeof err);
    CHECKF(a != NULL, "%s", err);
    if (!a) return;
    CHECK_EQ(st_count(a), 4);
    CHECK_STR(st_tensor_at(a, 0)->name, "a"); /* sorted by name */
    const st_tensor_t *b = st_find(a, "b");
    CHECK(b && b->dtype == ST_BF16 && b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 3 && b->numel == 6);
    CHECK(b && b->nbytes == 12 && b->data == img + len - 29 + 16);
    const st_tensor_t *z = st_find(a, "z");
    CHECK(z && z->numel == 0 && z->nbytes == 0);
    CHECK(st_find(a, "__metadata__") == NULL && st_find(a, "c") == NULL);
    st_close(a);
    free(img);
}

static void expect_error(const char *header, size_t data, const char *want) {
    size_t len;
    uint8_t *img = image(header, data, &len);
    err[0] = 0;
    st_archive_t *a = st_from_memory(img, len, "hdr", err, sizeof err);
    CHECKF(a == NULL && strstr(err, want) && strstr(err, "hdr"), "header %.60s...: error \"%s\", wanted \"%s\"", header, err, want);
    st_close(a);
    free(img);
}

#define T1(dtype, shape, offs) "{\"t\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void test_hostile_headers(void) {
    expect_error("[1,2]", 0, "not a JSON object");
    expect_error("{\"t\":", 0, "not valid JSON");
    expect_error("{\"t\":{},\"t\":{}}", 0, "not valid JSON"); /* duplicate key */
    expect_error("{\"t\":[]}", 0, "not an object");
    expect_error("{\"__metadata__\":3}", 0, "__metadata__");
    expect_error("{\"\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "empty name");
    expect_error("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"dtype\"");
    expect_error(T1("Q4_K", "[1]", "[0,4]"), 4, "unknown dtype");
    expect_error(T1("F32", "3", "[0,4]"), 4, "\"shape\"");
    expect_error(T1("F32", "[-1]", "[0,4]"), 4, "shape[0]");
    expect_error(T1("F32", "[1.5]", "[0,4]"), 4, "shape[0]");
    expect_error(T1("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, "dimensions");
    expect_error(T1("F32", "[4294967296,4294967296,4294967296]", "[0,4]"), 4, "overflows");
    expect_error(T1("F32", "[1000]", "[0,4000]"), 4, "more bytes than the data region");
    expect_error(T1("F32", "[1]", "[0]"), 4, "not a pair");
    expect_error(T1("F32", "[1]", "[4,8]"), 4, "outside the data region");
    expect_error(T1("F32", "[1]", "[4,0]"), 8, "reversed");
    expect_error(T1("F32", "[1]", "[0,8]"), 8, "span 8 bytes");
    expect_error(T1("F32", "[1]", "[0,99999999999999999999]"), 8, "not valid JSON"); /* integer too big */
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap");
}

static void test_bad_length_prefix(void) {
    size_t len;
    uint8_t *img = image(VALID, 29, &len);
    img[7] = 0x40; /* length 2^62-ish */
    st_archive_t *a = st_from_memory(img, len, "big", err, sizeof err);
    CHECKF(!a && strstr(err, "exceeds the file"), "%s", err);
    a = st_from_memory(img, 5, "short", err, sizeof err);
    CHECKF(!a && strstr(err, "too short"), "%s", err);
    free(img);
}

/* Every strict prefix of a valid file is rejected with a reason. */
static void test_truncations(void) {
    size_t len;
    uint8_t *img = image(VALID, 29, &len);
    int accepted = 0, unnamed = 0;
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1); /* exact size, so ASan sees any overread */
        memcpy(cut, img, n);
        err[0] = 0;
        st_archive_t *a = st_from_memory(cut, n, "cut", err, sizeof err);
        accepted += a != NULL;
        unnamed += !a && !strstr(err, "cut");
        st_close(a);
        free(cut);
    }
    CHECK_EQ(accepted, 0);
    CHECK_EQ(unnamed, 0);
    free(img);
}

static char dir[64];

static void write_file(const char *name, const void *p, size_t n) {
    buf_t path = {0};
    buf_printf(&path, "%s/%s", dir, name);
    FILE *f = fopen(buf_cstr(&path), "wb");
    fwrite(p, 1, n, f);
    fclose(f);
    buf_free(&path);
}

static st_writer_t *three_tensors(void) {
    st_writer_t *w = stw_new();
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        int64_t shape[2] = {i + 1, 4};
        float *v = malloc((size_t)(i + 1) * 4 * sizeof *v);
        for (int k = 0; k < (i + 1) * 4; k++) v[k] = (float)(100 * i + k);
        stw_add(w, name, ST_F32, 2, shape, v, (size_t)(i + 1) * 16);
    }
    return w;
}

static bool holds_three(st_archive_t *a) {
    if (!a || st_count(a) != 3) return false;
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        const st_tensor_t *t = st_find(a, name);
        float v;
        if (!t || t->shape[0] != i + 1) return false;
        memcpy(&v, t->data + t->nbytes - 4, 4);
        if (v != (float)(100 * i + (i + 1) * 4 - 1)) return false;
    }
    return true;
}

static void test_files(void) {
    st_writer_t *w = three_tensors();
    CHECK_EQ(stw_write(w, dir, 1, err, sizeof err), 0);
    stw_free(w);
    st_archive_t *a = st_open(dir, err, sizeof err);
    CHECKF(holds_three(a) && st_shard_count(a) == 1, "%s", err);
    st_close(a);
    buf_t p = {0};
    buf_printf(&p, "%s/model.safetensors", dir);
    a = st_open(buf_cstr(&p), err, sizeof err);
    CHECK(holds_three(a));
    st_close(a);
    buf_free(&p);
    a = st_open("/nonexistent/model.safetensors", err, sizeof err);
    CHECKF(!a && strstr(err, "/nonexistent"), "%s", err);
}

static void test_sharded(void) {
    st_writer_t *w = three_tensors();
    CHECK_EQ(stw_write(w, dir, 3, err, sizeof err), 0);
    stw_free(w);
    st_archive_t *a = st_open(dir, err, sizeof err); /* the index wins over model.safetensors */
    CHECKF(holds_three(a) && st_shard_count(a) == 3, "%s", err);
    st_close(a);
}

static void expect_index_error(const char *index, const char *want) {
    write_file("model.safetensors.index.json", index, strlen(index));
    err[0] = 0;
    st_archive_t *a = st_open(dir, err, sizeof err);
    CHECKF(!a && strstr(err, want), "index %.70s: error \"%s\", wanted \"%s\"", index, err, want);
    st_close(a);
}

static void test_bad_index(void) {
    /* shards from test_sharded: t0 in 00001, t1 in 00002, t2 in 00003 */
    const char *s1 = "model-00001-of-00003.safetensors", *s2 = "model-00002-of-00003.safetensors";
    char text[512];
    expect_index_error("{\"weight_map\":{}}", "lists no tensors");
    expect_index_error("{\"weight_map\":[]}", "weight_map");
    expect_index_error("{\"weight_map\":{\"t0\":\"../model-00001-of-00003.safetensors\"}}", "plain file name");
    expect_index_error("{\"weight_map\":{\"t0\":\"missing.safetensors\"}}", "missing.safetensors");
    snprintf(text, sizeof text, "{\"weight_map\":{\"t0\":\"%s\",\"t1\":\"%s\"}}", s2, s1);
    expect_index_error(text, "is listed under");
    snprintf(text, sizeof text, "{\"weight_map\":{\"t0\":\"%s\",\"t9\":\"%s\"}}", s1, s1);
    expect_index_error(text, "has no such tensor");
    expect_index_error("{\"weight_map\":{\"t0\":\"model.safetensors\"}}", "not listed"); /* it also holds t1, t2 */
    size_t len;
    uint8_t *dup = image(T1("F32", "[1]", "[0,4]"), 4, &len); /* a second "t" */
    write_file("dup.safetensors", dup, len);
    free(dup);
    expect_index_error("{\"weight_map\":{\"t\":\"dup.safetensors\",\"x\":\"model.safetensors\"}}", "not listed");
    uint8_t *again = image("{\"t0\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, &len);
    write_file("again.safetensors", again, len);
    free(again);
    snprintf(text, sizeof text, "{\"weight_map\":{\"t0\":\"%s\",\"u\":\"again.safetensors\"}}", s1);
    expect_index_error(text, "appears in both");
    expect_index_error("{\"weight_map\":", "not valid JSON");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/di-test-st-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_valid_image);
    RUN(test_hostile_headers);
    RUN(test_bad_length_prefix);
    RUN(test_truncations);
    RUN(test_files);
    RUN(test_sharded);
    RUN(test_bad_index);
    t_remove_tree(dir);
    return t_finish();
}
