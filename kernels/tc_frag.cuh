// Pieces of mma.sync m16n8k16 (bf16 operands, fp32 accumulators) for the tensor-core attention
// and indexer: fp32 values as bf16 pieces, shared-memory fragment loads, the multiply-add and
// 16-byte asynchronous copies into shared memory.
#pragma once

#include "common.cuh"

// Two bf16 in one register, a in the low half (the lower column of a fragment pair).
__device__ __forceinline__ uint32_t tc_pack(__nv_bfloat162 h) { return *(uint32_t *)&h; }

// The NP bf16 pieces of the pair (x0, x1): piece t is the bf16 of what pieces 0..t-1 left, so
// three pieces hold all 24 bits of an fp32 (one is plain bf16 rounding).
template <int NP>
__device__ __forceinline__ void tc_split(float2 x, uint32_t p[NP]) {
#pragma unroll
    for (int t = 0; t < NP; t++) {
        __nv_bfloat162 h = __floats2bfloat162_rn(x.x, x.y);
        p[t] = tc_pack(h);
        if (t + 1 < NP) {
            float2 f = __bfloat1622float2(h);
            x.x -= f.x, x.y -= f.y;
        }
    }
}

// Four 8x8 bf16 matrices from shared memory (lane l gives the row address of matrix l / 8);
// _t transposes each matrix.
__device__ __forceinline__ void tc_ldsm(const void *p, uint32_t r[4]) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void tc_ldsm_t(const void *p, uint32_t r[4]) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a (16x16, row-major fragment) * b (16x8, column fragment b0 b1).
__device__ __forceinline__ void tc_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc += the products of pieces p < n of a with b. With three pieces (bf16x3, the CPU's numbers
// up to summation order) each call's products go into a fresh accumulator, smallest first, that
// is then added to acc rounding to nearest: the tensor cores' fp32 accumulation does not round
// to nearest, and chained through a whole reduction it moved attention outputs by ~1e-6.
template <int NP>
__device__ __forceinline__ void tc_mma_pieces(float acc[4], const uint32_t a[NP][4], uint32_t b0, uint32_t b1, int n) {
    if (NP < 3) {
#pragma unroll
        for (int p = 0; p < NP; p++)
            if (p < n) tc_mma(acc, a[p], b0, b1);
        return;
    }
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int p = NP - 1; p >= 0; p--)
        if (p < n) tc_mma(t, a[p], b0, b1);
#pragma unroll
    for (int e = 0; e < 4; e++) acc[e] += t[e];
}

// The indexer's term of accumulator column e summed over the fragment's 16 rows (heads g and
// g + 8 of every lane group g): relu(acc) * q_scale * the head's weight (w0, w1), added across
// the lanes in a fixed order; every lane ends with the sum.
__device__ __forceinline__ float tc_head_sum(const float acc[4], int e, float w0, float w1, float q_scale) {
    float v = fmaxf(acc[e], 0.0f) * q_scale * w0 + fmaxf(acc[2 + e], 0.0f) * q_scale * w1;
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    return v;
}

// The A fragment (rows g and g + 8, columns 2t.. and 2t + 8..) of a row-major fp32 matrix in
// shared memory as NP bf16 pieces: p points at (row g, column 2t), ld in floats.
template <int NP>
__device__ __forceinline__ void tc_frag_a(const float *p, int ld, uint32_t a[NP][4]) {
    uint32_t x[4][NP];
    tc_split<NP>(*(const float2 *)p, x[0]);
    tc_split<NP>(*(const float2 *)(p + 8 * ld), x[1]);
    tc_split<NP>(*(const float2 *)(p + 8), x[2]);
    tc_split<NP>(*(const float2 *)(p + 8 * ld + 8), x[3]);
#pragma unroll
    for (int t = 0; t < NP; t++)
#pragma unroll
        for (int j = 0; j < 4; j++) a[t][j] = x[j][t];
}

// 16 bytes global -> shared without a register round trip; zeros when !ok (src is then not read).
__device__ __forceinline__ void tc_cp16(void *dst, const void *src, bool ok) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void tc_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void tc_cp_wait() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Until at most N of this thread's newest commit groups are in flight.
template <int N> __device__ __forceinline__ void tc_cp_wait_newest() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
