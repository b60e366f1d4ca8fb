#include "qat.h"
#include "dequant.h"

#include <math.h>
#include <string.h>

float qat_pow2_ceil(float t) {
    uint32_t bits;
    memcpy(&bits, &t, 4);
    int k = (int)((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0);
    return exp2f((float)k);
}

float qat_scale(qat_kind_t kind, float amax) {
    switch (kind) {
    case QAT_FP8_UE8M0: return qat_pow2_ceil(fmaxf(amax, 1e-4f) * (float)(1.0 / 448.0));
    case QAT_FP4_UE8M0: return qat_pow2_ceil(fmaxf(amax, (float)(6.0 * 0x1p-126)) * (float)(1.0 / 6.0));
    case QAT_FP4_E4M3: return e4m3_to_f32(f32_to_e4m3(fmaxf(amax, (float)(6.0 * 0x1p-9)) / 6.0f));
    }
    return 1.0f;
}

void qat_apply(qat_kind_t kind, int block, float *x, size_t n) {
    float lim = kind == QAT_FP8_UE8M0 ? 448.0f : 6.0f;
    for (size_t b = 0; b + (size_t)block <= n; b += (size_t)block) {
        float *v = x + b, amax = 0.0f;
        for (int i = 0; i < block; i++) amax = fmaxf(amax, fabsf(v[i]));
        float s = qat_scale(kind, amax);
        for (int i = 0; i < block; i++) {
            float q = fminf(fmaxf(v[i] / s, -lim), lim);
            float d = kind == QAT_FP8_UE8M0 ? e4m3_to_f32(f32_to_e4m3(q)) : e2m1_to_f32(f32_to_e2m1(q));
            v[i] = d * s;
        }
    }
}
