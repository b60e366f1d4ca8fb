/* Number formats: decoders, encoders, block dequantization of stored weights. */
#include "dequant.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

static const float E2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float e4m3_to_f32(uint8_t b) {
    uint32_t e = (b >> 3) & 15, m = b & 7, sign = (uint32_t)(b & 0x80) << 24;
    if (e == 15 && m == 7) return (b & 0x80) ? -NAN : NAN;
    float v;
    if (e == 0) v = (float)m * 0x1p-9f;
    else { /* built from the bits: ldexpf per element dominated weight dequantization */
        uint32_t u = (e - 7 + 127) << 23 | m << 20;
        memcpy(&v, &u, 4);
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sign;
    memcpy(&v, &u, 4);
    return v;
}

float e2m1_to_f32(uint8_t code) {
    float v = E2M1[code & 7];
    return (code & 8) ? -v : v;
}

float e8m0_to_f32(uint8_t b) {
    if (b == 255) return NAN;
    uint32_t u = b ? (uint32_t)b << 23 : 0x00400000u; /* 2^-127 is subnormal */
    float v;
    memcpy(&v, &u, 4);
    return v;
}

uint16_t f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

uint8_t f32_to_e4m3(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(x)) return sign | 0x7F;
    if (a >= 448.0f) return sign | 0x7E;
    if (a < 0x1p-6f) return sign | (uint8_t)rintf(a * 512.0f); /* subnormal; 8 rounds up to the first normal */
    int e;
    frexpf(a, &e); /* a = f 2^e, f in [0.5, 1) */
    int E = e - 1;
    int m = (int)rintf((ldexpf(a, -E) - 1.0f) * 8.0f);
    if (m == 8) {
        m = 0;
        E++;
    }
    int code = (E + 7) << 3 | m;
    return sign | (uint8_t)(code > 0x7E ? 0x7E : code);
}

uint8_t f32_to_e2m1(float x) {
    static const float MID[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    float a = fabsf(x);
    uint8_t code = 0;
    if (!isnan(x))
        for (int i = 0; i < 7; i++) code += a > MID[i] || (a == MID[i] && (i & 1)); /* ties go to the even code */
    return code | (signbit(x) ? 8 : 0);
}

size_t wmat_scale_count(int64_t rows, int64_t cols, int block_rows, int block_cols) {
    return (size_t)((rows + block_rows - 1) / block_rows) * (size_t)((cols + block_cols - 1) / block_cols);
}

static float scale_at(const wmat_t *m, int64_t sr, int64_t sc) {
    int64_t ncb = (m->cols + m->block_cols - 1) / m->block_cols;
    size_t i = (size_t)(sr * ncb + sc);
    if (!m->scale_f32) return e8m0_to_f32(m->scale[i]);
    float f;
    memcpy(&f, m->scale + 4 * i, 4);
    return f;
}

/* Decode tables for the hot loop below (per-element decoding dominated the CPU forward). */
static float e4m3_lut[256], e2m1_lut[16];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void) {
    for (int b = 0; b < 256; b++) e4m3_lut[b] = e4m3_to_f32((uint8_t)b);
    for (int b = 0; b < 16; b++) e2m1_lut[b] = e2m1_to_f32((uint8_t)b);
}

void wmat_rows(const wmat_t *m, int64_t r0, int64_t n, float *out) {
    pthread_once(&lut_once, lut_init);
    int64_t cols = m->cols;
    switch (m->kind) {
    case WQ_F32:
        memcpy(out, m->data + (size_t)(r0 * cols) * 4, (size_t)(n * cols) * 4);
        return;
    case WQ_BF16: {
        typedef uint16_t u16x8 __attribute__((vector_size(16)));
        typedef uint32_t u32x8 __attribute__((vector_size(32)));
        const uint8_t *src = m->data + (size_t)(r0 * cols) * 2;
        int64_t i = 0, total = n * cols;
        for (; i + 8 <= total; i += 8) { /* eight at a time: the scalar loop dominated the LM head */
            u16x8 h;
            memcpy(&h, src + 2 * i, 16);
            u32x8 u = __builtin_convertvector(h, u32x8) << 16;
            memcpy(out + i, &u, 32);
        }
        for (; i < total; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = bf16_to_f32(h);
        }
        return;
    }
    case WQ_FP8:
    case WQ_FP4: {
        size_t row_bytes = m->kind == WQ_FP8 ? (size_t)cols : (size_t)((cols + 1) / 2);
        for (int64_t r = r0; r < r0 + n; r++, out += cols) {
            const uint8_t *row = m->data + (size_t)r * row_bytes;
            for (int64_t c0 = 0; c0 < cols; c0 += m->block_cols) {
                float s = scale_at(m, r / m->block_rows, c0 / m->block_cols);
                int64_t c1 = c0 + m->block_cols < cols ? c0 + m->block_cols : cols;
                if (m->kind == WQ_FP8)
                    for (int64_t c = c0; c < c1; c++) out[c] = e4m3_lut[row[c]] * s;
                else
                    for (int64_t c = c0; c < c1; c++) out[c] = e2m1_lut[(row[c >> 1] >> (4 * (c & 1))) & 15] * s;
            }
        }
        return;
    }
    }
}
