/* The QAT numeric contract of DeepSeek-V4.1 (MODEL_V41.md §4): block fake-quantization that is
 * part of the model, applied to the window KV rows, the compressed pool entries and the
 * indexer keys and queries. Written to match transformers' _fake_quant_fp8_block and
 * _fake_quant_fp4_block operation for operation in fp32 (scale products by the fp32 constant
 * 1/448 or 1/6 as HF computes them), so the decisions are bit-identical to HF's. These host
 * functions are the definition the CPU backend uses and other backends are tested against. */
#ifndef DI_QAT_H
#define DI_QAT_H

#include <stddef.h>

typedef enum {
    QAT_FP8_UE8M0, /* E4M3 (±448), scale 2^ceil(log2(max(amax,1e-4)/448)): window KV, block 32 */
    QAT_FP4_UE8M0, /* E2M1 (±6), scale 2^ceil(log2(max(amax,6*2^-126)/6)): indexer, block 32 */
    QAT_FP4_E4M3,  /* E2M1, scale e4m3(max(amax,6*2^-9)/6): compressed main KV, block 16 */
} qat_kind_t;

/* 2^(exponent of t, plus 1 if t is not a power of two), from the fp32 bits (HF
 * _pow2_ceil_scale). t > 0. */
float qat_pow2_ceil(float t);

/* The scale of one block with absolute maximum amax. */
float qat_scale(qat_kind_t kind, float amax);

/* Quantize-dequantize x[0..n) in place as blocks of `block` along the row; n must be a
 * multiple of block (HF leaves other widths untouched; the config validation guarantees it). */
void qat_apply(qat_kind_t kind, int block, float *x, size_t n);

#endif
