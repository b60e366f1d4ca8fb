// QAT fake quantization of one value (lib/qat.h) with qat_apply's fp32 operations: the block's
// scale from its absolute maximum, then the value through the grid and back. qat.cu and
// rope_qat.cu, so that both decide every rounding as the CPU does.
#pragma once

#include "common.cuh"

enum { QAT_FP8_UE8M0, QAT_FP4_UE8M0, QAT_FP4_E4M3 }; // = qat_kind_t

__device__ __forceinline__ float qat_scale_dev(int kind, float amax) {
    switch (kind) {
    case QAT_FP8_UE8M0: return fp8_scale_dev(amax);
    case QAT_FP4_UE8M0: return pow2_ceil_dev(fmaxf(amax, (float)(6.0 * 0x1p-126)) * (float)(1.0 / 6.0));
    default: return e4m3_f(f32_to_e4m3_dev(fmaxf(amax, (float)(6.0 * 0x1p-9)) / 6.0f));
    }
}

// val quantized with its block's scale sc.
__device__ __forceinline__ float qat_value(int kind, float val, float sc) {
    float lim = kind == QAT_FP8_UE8M0 ? 448.0f : 6.0f;
    float q = fminf(fmaxf(val / sc, -lim), lim);
    float d = kind == QAT_FP8_UE8M0 ? e4m3_f(f32_to_e4m3_dev(q)) : e2m1_f(f32_to_e2m1_dev(q));
    return d * sc;
}
