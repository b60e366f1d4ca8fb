/* The checkpoint's number formats and their conversion to fp32.
 *
 * Formats (MODEL_V41.md §3, §4):
 *   BF16      upper half of an fp32.
 *   F8_E4M3   "fn" variant: bias 7, 3 mantissa bits, subnormals m*2^-9, max 448, 0x7F/0xFF NaN.
 *   E2M1      FP4 code in a nibble, sign in bit 3: 0, .5, 1, 1.5, 2, 3, 4, 6 and negatives.
 *   F8_E8M0   UE8M0 scale byte b = 2^(b-127); 255 is NaN.
 *
 * A weight as stored is a wmat_t: a view into the mapping plus its block scales. The dense FP8
 * weights use 32x32 tiles (scale [ceil(rows/32), ceil(cols/32)]), the FP4 routed experts and the
 * FP8 Engram tables 1x32 blocks (scale [rows, ceil(cols/32)]); wmat_t takes any block shape.
 * Dequantized value = decode(element) * scale, computed in fp32 (exact for E8M0 scales: a
 * power of two times a value with at most 4 significant bits; it overflows to inf only when
 * the true value exceeds the fp32 range). */
#ifndef DI_DEQUANT_H
#define DI_DEQUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

float bf16_to_f32(uint16_t h);
float e4m3_to_f32(uint8_t b);
float e2m1_to_f32(uint8_t code); /* low 4 bits used */
float e8m0_to_f32(uint8_t b);

/* Encoders (round to nearest, ties to even). e4m3 and e2m1 saturate at ±448 and ±6; NaN in
 * gives the format's NaN (e4m3) or 0 (e2m1 has none). Used by the checkpoint generator. */
uint16_t f32_to_bf16(float x);
uint8_t f32_to_e4m3(float x);
uint8_t f32_to_e2m1(float x);

typedef enum {
    WQ_F32,  /* 4 bytes per element, no scale */
    WQ_BF16, /* 2 bytes per element, no scale */
    WQ_FP8,  /* F8_E4M3 per element, block scales */
    WQ_FP4,  /* E2M1 packed two per byte along a row, even column in the low nibble; block scales */
} wq_kind_t;

typedef struct {
    wq_kind_t kind;
    int64_t rows, cols;       /* logical shape; a vector is 1 x n */
    const uint8_t *data;      /* row-major; FP4 rows are ceil(cols/2) bytes */
    const uint8_t *scale;     /* FP8/FP4: [ceil(rows/block_rows)][ceil(cols/block_cols)], row-major */
    bool scale_f32;           /* scales stored as F32 (some Base checkpoints) instead of E8M0 */
    int block_rows, block_cols;
} wmat_t;

/* Number of block scales a rows x cols matrix has. */
size_t wmat_scale_count(int64_t rows, int64_t cols, int block_rows, int block_cols);

/* Dequantizes rows [r0, r0+n) into out (n*cols floats, row-major). The caller keeps
 * r0+n <= rows. Safe to call from several threads on disjoint outputs. */
void wmat_rows(const wmat_t *m, int64_t r0, int64_t n, float *out);

#endif
