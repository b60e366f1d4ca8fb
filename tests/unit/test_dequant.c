/* Number formats and block dequantization against straightforward references (computed in
 * double from the format definitions), on random blocks including extreme scales. */
#include "dequant.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static bool same(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

/* The definitions, spelled out. */
static double ref_e4m3(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 15 && m == 7 ? NAN : e == 0 ? m * pow(2, -9) : (1 + m / 8.0) * pow(2, e - 7);
    return b & 0x80 ? -v : v;
}
static double ref_e2m1(uint8_t c) {
    static const double V[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return c & 8 ? -V[c & 7] : V[c & 7];
}
static double ref_e8m0(uint8_t b) { return b == 255 ? NAN : pow(2, b - 127); }

static void test_decoders(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        bad += !same(e4m3_to_f32((uint8_t)b), (float)ref_e4m3((uint8_t)b));
        bad += !same(e8m0_to_f32((uint8_t)b), (float)ref_e8m0((uint8_t)b));
    }
    for (int c = 0; c < 16; c++) bad += !same(e2m1_to_f32((uint8_t)c), (float)ref_e2m1((uint8_t)c));
    CHECK_EQ(bad, 0);
    CHECK(e4m3_to_f32(0x7E) == 448.0f);
    CHECK(e4m3_to_f32(0x01) == 0x1p-9f);
    CHECK(e8m0_to_f32(0) == 0x1p-127f);
    CHECK(bf16_to_f32(0x3F80) == 1.0f);
    CHECK(bf16_to_f32(0xC040) == -3.0f);
}

static void test_encoders(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        float v = e4m3_to_f32((uint8_t)b);
        if (!isnan(v)) bad += f32_to_e4m3(v) != b;
    }
    for (int c = 0; c < 16; c++) bad += f32_to_e2m1(e2m1_to_f32((uint8_t)c)) != c;
    CHECK_EQ(bad, 0);
    /* e2m1 ties go to the even code: down at .25 1.25 2.5 5, up at .75 1.75 3.5 */
    static const float tie[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const float want[7] = {0, 1, 1, 2, 2, 4, 4};
    for (int i = 0; i < 7; i++) CHECKF(e2m1_to_f32(f32_to_e2m1(tie[i])) == want[i], "e2m1 tie %g", tie[i]);
    CHECK(e2m1_to_f32(f32_to_e2m1(100.0f)) == 6.0f);
    CHECK(e2m1_to_f32(f32_to_e2m1(-0.3f)) == -0.5f);
    /* e4m3: nearest, ties to even mantissa, saturating, subnormals */
    CHECK(e4m3_to_f32(f32_to_e4m3(1.0625f)) == 1.0f);   /* tie between 1 and 1.125 */
    CHECK(e4m3_to_f32(f32_to_e4m3(1.1875f)) == 1.25f);  /* tie between 1.125 and 1.25 */
    CHECK(e4m3_to_f32(f32_to_e4m3(1000.0f)) == 448.0f);
    CHECK(e4m3_to_f32(f32_to_e4m3(-0x1.8p-9f)) == -0x1p-8f); /* 1.5 quanta: tie up to even 2 */
    CHECK(e4m3_to_f32(f32_to_e4m3(0x1.fp-7f)) == 0x1p-6f);   /* rounds into the first normal */
    CHECK(f32_to_e4m3(NAN) == 0x7F);
    /* bf16 round to nearest even */
    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_bf16(0x1.01p0f) == 0x3F80);  /* tie: stays even */
    CHECK(f32_to_bf16(0x1.03p0f) == 0x3F82);  /* tie: up to even */
    CHECK(f32_to_bf16(0x1.0101p0f) == 0x3F81);
}

/* A scale byte: mostly extreme values, sometimes anything (255 = NaN included). */
static uint8_t scale_byte(void) {
    static const uint8_t EXTREME[] = {0, 1, 2, 100, 126, 127, 128, 150, 253, 254};
    return next() % 4 ? EXTREME[next() % sizeof EXTREME] : (uint8_t)next();
}

static void check_blocks(wq_kind_t kind, int64_t rows, int64_t cols, int br, int bc, bool f32_scales) {
    size_t row_bytes = kind == WQ_FP4 ? (size_t)(cols + 1) / 2 : (size_t)cols;
    size_t ns = wmat_scale_count(rows, cols, br, bc);
    uint8_t *data = malloc((size_t)rows * row_bytes), *scale = malloc(ns * 4);
    for (size_t i = 0; i < (size_t)rows * row_bytes; i++) data[i] = (uint8_t)next();
    for (size_t i = 0; i < ns; i++) {
        if (f32_scales) {
            float s = ldexpf((float)(next() % 1000 + 1) / 997.0f, (int)(next() % 200) - 100);
            memcpy(scale + 4 * i, &s, 4);
        } else {
            scale[i] = scale_byte();
        }
    }
    wmat_t m = {.kind = kind, .rows = rows, .cols = cols, .data = data, .scale = scale, .scale_f32 = f32_scales,
                .block_rows = br, .block_cols = bc};
    int64_t r0 = rows / 3, n = rows - r0; /* a row range, not from 0 */
    float *out = malloc((size_t)(n * cols) * sizeof *out);
    wmat_rows(&m, r0, n, out);
    int64_t nbc = (cols + bc - 1) / bc;
    int bad = 0;
    for (int64_t r = r0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            size_t si = (size_t)((r / br) * nbc + c / bc);
            double s;
            if (f32_scales) {
                float f;
                memcpy(&f, scale + 4 * si, 4);
                s = f;
            } else {
                s = ref_e8m0(scale[si]);
            }
            double v = kind == WQ_FP8 ? ref_e4m3(data[r * cols + c])
                                      : ref_e2m1((uint8_t)((c & 1) ? data[r * (int64_t)row_bytes + c / 2] >> 4
                                                                   : data[r * (int64_t)row_bytes + c / 2] & 15));
            bad += !same(out[(r - r0) * cols + c], (float)(v * s));
        }
    CHECKF(bad == 0, "%s %lldx%lld blocks %dx%d%s: %d mismatches", kind == WQ_FP8 ? "fp8" : "fp4", (long long)rows,
           (long long)cols, br, bc, f32_scales ? " f32 scales" : "", bad);
    free(out);
    free(data);
    free(scale);
}

static void test_fp8_tiles(void) {
    for (int k = 0; k < 20; k++) check_blocks(WQ_FP8, 96, 128, 32, 32, false);
    check_blocks(WQ_FP8, 70, 45, 32, 32, false); /* partial tiles on both edges */
    check_blocks(WQ_FP8, 33, 31, 32, 32, true);
    check_blocks(WQ_FP8, 64, 96, 1, 32, false);  /* Engram table rows */
}

static void test_fp4_blocks(void) {
    for (int k = 0; k < 20; k++) check_blocks(WQ_FP4, 40, 128, 1, 32, false);
    check_blocks(WQ_FP4, 7, 45, 1, 32, false); /* odd column count: last byte half used */
    check_blocks(WQ_FP4, 9, 64, 1, 32, true);
}

static void test_plain(void) {
    float f[6] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -7.0f}, out[6];
    wmat_t m = {.kind = WQ_F32, .rows = 3, .cols = 2, .data = (const uint8_t *)f};
    wmat_rows(&m, 1, 2, out);
    CHECK(!memcmp(out, f + 2, 4 * sizeof(float)));
    uint16_t h[4];
    for (int i = 0; i < 4; i++) h[i] = f32_to_bf16(f[i]);
    m = (wmat_t){.kind = WQ_BF16, .rows = 2, .cols = 2, .data = (const uint8_t *)h};
    wmat_rows(&m, 0, 2, out);
    for (int i = 0; i < 4; i++) CHECK(out[i] == f[i]); /* these are exact in bf16 */
}

int main(void) {
    RUN(test_decoders);
    RUN(test_encoders);
    RUN(test_fp8_tiles);
    RUN(test_fp4_blocks);
    RUN(test_plain);
    return t_finish();
}
