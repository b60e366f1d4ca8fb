// RoPE then QAT fake quantization of rows, from x into out, in one launch: rope.cu's rotation
// and qat.cu's quantization with their bits. Decode runs the window KV, the compressor's keys and
// entries and the indexer's query through it: two or three dependent launches fewer, each
// ~1.5 us on the attention branch's chain of small kernels (run 218).
#include "qat.cuh"

// A block a row, a thread four consecutive channels (cols a multiple of 4, head_dim too, so that
// they lie in one head): each head rotates its last 2*half channels in adjacent pairs by pos * f_p;
// then, when the row's qat is set, each `block` channels (4 or 8 threads) share their absolute
// maximum by shuffles and are quantized (a partial trailing block is left alone, as qat_apply
// does). Row r of the launch: from the table (row, position, qat), or r0 + r at pos0 + r * step.
__global__ void rope_qat_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, int cols, int head_dim, const float *f,
                                int half, int64_t r0, int64_t pos0, int64_t step, int qat, const int64_t *table, int kind,
                                int block) {
    const int c0 = 4 * threadIdx.x;
    const bool live = c0 < cols;
    const int in0 = c0 % head_dim - (head_dim - 2 * half); /* the first pair's channel in the rotated part */
    const bool turn0 = live && in0 >= 0, turn1 = live && in0 + 2 >= 0;
    const float f0 = turn0 ? f[in0 / 2] : 0.0f, f1 = turn1 ? f[(in0 + 2) / 2] : 0.0f;
    int64_t row = r0 + blockIdx.x, pos = pos0 + blockIdx.x * step;
    float cos0, sin0, cos1, sin1;
    if (!table) rope_angle(pos, f0, 0, cos0, sin0), rope_angle(pos, f1, 0, cos1, sin1);
    pdl_begin();
    if (table) {
        row = table[3 * blockIdx.x], pos = table[3 * blockIdx.x + 1], qat = (int)table[3 * blockIdx.x + 2];
        rope_angle(pos, f0, 0, cos0, sin0), rope_angle(pos, f1, 0, cos1, sin1);
    }
    float4 v = live ? *(const float4 *)(x + row * ldx + c0) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (turn0) rope_turn(v.x, v.y, cos0, sin0);
    if (turn1) rope_turn(v.z, v.w, cos1, sin1);
    if (qat) { /* the same for the whole block: the shuffles see whole warps */
        int group = block / 4;
        float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
        for (int o = group / 2; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, group));
        if (live && (c0 / block + 1) * block <= cols) {
            float sc = qat_scale_dev(kind, amax);
            v.x = qat_value(kind, v.x, sc), v.y = qat_value(kind, v.y, sc);
            v.z = qat_value(kind, v.z, sc), v.w = qat_value(kind, v.w, sc);
        }
    }
    if (live) *(float4 *)(out + row * ldo + c0) = v;
}

extern "C" int k_rope_qat_ok(const float *out, int64_t ldo, const float *x, int64_t ldx, int64_t cols, int head_dim, int block) {
    return cols % 4 == 0 && cols <= 4096 && head_dim > 0 && head_dim % 4 == 0 && (block == 16 || block == 32) &&
           (uintptr_t)out % 16 == 0 && ldo % 4 == 0 && (uintptr_t)x % 16 == 0 && ldx % 4 == 0;
}

extern "C" cudaError_t k_rope_qat(float *out, int64_t ldo, const float *x, int64_t ldx, int64_t rows, int64_t cols, int head_dim,
                                  const float *inv_freq, int half, int64_t r0, int64_t pos0, int64_t pos_step, int qat,
                                  const int64_t *table, int kind, int block, cudaStream_t s) {
    if (!k_rope_qat_ok(out, ldo, x, ldx, cols, head_dim, block) || 2 * half > head_dim) return cudaErrorInvalidValue;
    if (rows <= 0) return cudaSuccess;
    unsigned threads = (unsigned)ceil_div(cols / 4, 32) * 32;
    return k_launch(rope_qat_kernel, (unsigned)rows, threads, 0, s, out, ldo, x, ldx, (int)cols, head_dim, inv_freq, half, r0,
                    pos0, pos_step, qat, table, kind, block);
}
