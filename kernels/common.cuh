// Device helpers shared by the kernels: number formats (the exact decoders and encoders of
// lib/dequant.c and lib/qat.c, ported so that the device computes the same bits), weight-scale
// lookup, warp reductions and the launch (k_launch, programmatic dependent launch).
#pragma once

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>
#include <utility>

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The device's SMs and shared memory an SM (asked once a launcher): for grids sized to a wave.
static inline cudaError_t k_device_limits(int *sms, int *smem_sm) {
    static int n, smem;
    if (!n) {
        int dev, a = 0, b = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&a, cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
        if (e != cudaSuccess) return e;
        n = a, smem = b;
    }
    *sms = n, *smem_sm = smem;
    return cudaSuccess;
}

// ---- launches: programmatic dependent launch (sm_90) ------------------------------------------
// Every kernel is launched by k_launch with programmatic stream serialization (eager and in
// captured graphs): it may start once every block of the kernel before it in the stream has
// called pdl_trigger() or exited, so its launch and prologue overlap that kernel's tail instead
// of following its drain. The rules every kernel keeps:
// - pdl_wait() before it reads anything an earlier kernel wrote or writes anything an earlier
//   kernel may still read; it returns once the kernel before has completed and its writes are
//   visible. Only weights and the launch's arguments may be read before it (a matmul's first
//   weight fetches). Every kernel waits, even one that reads nothing of its predecessor's: a
//   kernel completes only after its wait, so the waits chain and the kernel after it may rely
//   on everything earlier having completed.
// - pdl_trigger() right after the wait: where it sits changes no result (the next kernel's wait
//   still waits for this one's completion), only how early the next one is resident.
// After a non-kernel operation (a copy, a memset, an event) or without the attribute (k_pdl 0,
// DI_CUDA_PDL=0 in lib/backend_cuda.c) both are no-ops and the stream serializes as usual; a
// kernel of a library (cuBLASLt) before ours is simply waited for.
extern int k_pdl;    /* kernels/launch.cu */
extern int k_hopper; /* the prefill kernels' Hopper forms (k_set_hopper_forms) */

// With a recorder set (kernels.h k_recorder) the launch goes to it instead of the stream. The
// arguments are converted to the kernel's parameter types, as cudaLaunchKernelEx converts them.
template <typename... P, typename... A>
static cudaError_t k_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A &&...args) {
    return [&](P... value) {
        void *argv[sizeof...(P) + 1] = {(void *)&value...};
        const size_t sizes[sizeof...(P) + 1] = {sizeof(P)...};
        k_launch_t l = {(const void *)kernel, grid, block, smem, s, (int)sizeof...(P), argv, sizes};
        return k_recorder ? k_recorder(&l) : k_launch_now(&l);
    }(std::forward<A>(args)...);
}

__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The first line of a kernel that reads nothing before its wait.
__device__ __forceinline__ void pdl_begin() {
    pdl_wait();
    pdl_trigger();
}

// Asks L2 for the 128-byte lines of bytes [p, p + n), `lanes` threads (this one number `lane`)
// taking them in turn: weight rows a kernel fetches before its pdl_wait.
__device__ __forceinline__ void prefetch_l2(const void *p, int64_t n, int lane, int lanes) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)127, end = (uintptr_t)p + (uintptr_t)n;
    for (a += (uintptr_t)lane * 128; a < end; a += (uintptr_t)lanes * 128) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a));
}

__device__ __forceinline__ float bits_f(uint32_t u) { return __uint_as_float(u); }

// RoPE (MODEL_V41 §3): pair p of a head at position P turns by P * f_p, in fp32 as the CPU does
// (sin negated for the inverse); rope.cu and the attention merge's inverse share it.
__device__ __forceinline__ void rope_angle(int64_t P, float f, int inverse, float &c, float &sn) {
    float ang = (float)P * f;
    c = cosf(ang), sn = sinf(ang);
    if (inverse) sn = -sn;
}
// Rounded product by product (no contraction into an FMA, which nvcc may choose differently
// in each kernel): every caller gets the same bits, and the CPU's arithmetic.
__device__ __forceinline__ void rope_turn(float &e, float &o, float c, float sn) {
    float e0 = e, o0 = o;
    e = __fsub_rn(__fmul_rn(e0, c), __fmul_rn(o0, sn));
    o = __fadd_rn(__fmul_rn(e0, sn), __fmul_rn(o0, c));
}

// A float's order-preserving integer key (larger float, larger key; -0 below +0, NaN by its
// bits): for radix selection and integer reductions over floats. float_of_order_key inverts it.
__device__ __forceinline__ uint32_t order_key(float v) {
    uint32_t u = __float_as_uint(v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

__device__ __forceinline__ float float_of_order_key(uint32_t k) { return __uint_as_float(k & 0x80000000u ? k & 0x7FFFFFFFu : ~k); }

// ---- decoders (lib/dequant.c) -------------------------------------------------------------
__device__ __forceinline__ float e4m3_f(uint8_t b) {
    uint32_t e = (b >> 3) & 15, m = b & 7, sign = (uint32_t)(b & 0x80) << 24;
    if (e == 15 && m == 7) return __uint_as_float(sign | 0x7FC00000u);
    float v = e == 0 ? (float)m * 0x1p-9f : bits_f((e - 7 + 127) << 23 | m << 20);
    return __uint_as_float(__float_as_uint(v) | sign);
}

// e2m1 (sign, 2 exponent bits, 1 mantissa bit) placed in an fp32's sign, exponent and
// mantissa fields is the value times 2^-126 (code 1, 0.5, lands on the subnormal 2^-127).
__device__ __forceinline__ float e2m1_f(uint32_t code) {
    return __uint_as_float((code & 7) << 22 | (code & 8) << 28) * 0x1p126f;
}

__device__ __forceinline__ float e8m0_f(uint8_t b) {
    if (b == 255) return __uint_as_float(0x7FC00000u);
    return __uint_as_float(b ? (uint32_t)b << 23 : 0x00400000u);
}

// Scale of the block holding element (r, c) of w.
__device__ __forceinline__ float kw_scale(const kw_t &w, const uint8_t *scale, int64_t r, int64_t c) {
    int64_t ncb = (w.cols + w.block_cols - 1) / w.block_cols;
    int64_t i = (r / w.block_rows) * ncb + c / w.block_cols;
    return w.scale_f32 ? ((const float *)scale)[i] : e8m0_f(scale[i]);
}

// The scales of row r of a weight with 32-column blocks (the fast kernels' layout), computed
// once per row: the scale of column c is row_scale(...)[c / 32].
__device__ __forceinline__ const uint8_t *row_scales(const kw_t &w, const uint8_t *scale, int64_t r) {
    int64_t ncb = (w.cols + 31) >> 5;
    return scale + (r / w.block_rows) * ncb * (w.scale_f32 ? 4 : 1);
}
__device__ __forceinline__ float scale_of(const uint8_t *rs, int scale_f32, int64_t c) {
    return scale_f32 ? ((const float *)rs)[c >> 5] : e8m0_f(rs[c >> 5]);
}

// Element (r, c) of w, dequantized (the generic slow path).
__device__ __forceinline__ float kw_at(const kw_t &w, const uint8_t *data, const uint8_t *scale, int64_t r, int64_t c) {
    switch (w.kind) {
    case KW_F32: return ((const float *)data)[r * w.cols + c];
    case KW_BF16: return bits_f((uint32_t)((const uint16_t *)data)[r * w.cols + c] << 16);
    case KW_FP8: return e4m3_f(data[r * w.cols + c]) * kw_scale(w, scale, r, c);
    default: {
        uint8_t b = data[r * ((w.cols + 1) / 2) + (c >> 1)];
        return e2m1_f(b >> (4 * (c & 1))) * kw_scale(w, scale, r, c);
    }
    }
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// ---- encoders (lib/dequant.c, lib/qat.c), bit-exact ports ----------------------------------------
// 2^(exponent of t, plus 1 if t is not a power of two), t > 0 (qat_pow2_ceil).
__device__ __forceinline__ float pow2_ceil_dev(float t) {
    uint32_t bits = __float_as_uint(t);
    int k = (int)((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0);
    return ldexpf(1.0f, k);
}
// The UE8M0 scale of an e4m3 block with absolute maximum amax (qat_scale's QAT_FP8_UE8M0).
__device__ __forceinline__ float fp8_scale_dev(float amax) { return pow2_ceil_dev(fmaxf(amax, 1e-4f) * (float)(1.0 / 448.0)); }

__device__ __forceinline__ uint8_t f32_to_e4m3_dev(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(x)) return sign | 0x7F;
    if (a >= 448.0f) return sign | 0x7E;
    if (a < 0x1p-6f) return sign | (uint8_t)rintf(a * 512.0f);
    int e;
    frexpf(a, &e);
    int E = e - 1;
    int m = (int)rintf((ldexpf(a, -E) - 1.0f) * 8.0f);
    if (m == 8) {
        m = 0;
        E++;
    }
    int code = (E + 7) << 3 | m;
    return sign | (uint8_t)(code > 0x7E ? 0x7E : code);
}

__device__ __forceinline__ uint8_t f32_to_e2m1_dev(float x) {
    const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    float a = fabsf(x);
    uint8_t code = 0;
    if (!isnan(x))
#pragma unroll
        for (int i = 0; i < 7; i++) code += a > mid[i] || (a == mid[i] && (i & 1));
    return code | (signbit(x) ? 8 : 0);
}

// Split-K arrival, after a block stored its partial sums: true (in every thread) for the one
// block of `count` that arrives at *counter last, once every block's stores are visible to it;
// that block resets the counter for the next launch.
__device__ __forceinline__ bool splitk_last(unsigned *counter, unsigned count) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == count - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// The grouping of a split-K sum, from the split count alone: `lanes` adjacent threads share an
// output (a power of two, at most a quarter of the splits, so that many splits are read in
// parallel whatever the tile); lane l adds splits l, l + lanes, ... in order, then the lanes
// are added pairwise. Every kernel that adds splits adds them so (the same bits).
__device__ __forceinline__ int splitk_lanes(int splits) {
    int lanes = 1;
    while (lanes < 32 && 8 * lanes <= splits) lanes *= 2;
    return lanes;
}

// Split-K fix-up by the whole block: adds every split's partials (NM planes of
// [splits][positions][n], one after another) for rows [p0, p1), columns [o0, o1) in the
// splitk_lanes grouping and hands the NM sums to emit(p, o, sums).
template <int NM, class Emit>
__device__ __forceinline__ void splitk_sum_with(const float *partial, int splits, int64_t positions, int64_t n_out, int64_t p0,
                                                int64_t p1, int64_t o0, int64_t o1, Emit emit) {
    int lanes = splitk_lanes(splits);
    int64_t on = o1 - o0, n = (p1 - p0) * on, per = blockDim.x / lanes, plane = (int64_t)splits * positions * n_out;
    int sub = threadIdx.x & (lanes - 1);
    for (int64_t i0 = 0; i0 < n; i0 += per) { /* the same trips for every thread: whole warps shuffle */
        int64_t i = i0 + threadIdx.x / lanes, p = p0 + i / on, o = o0 + i % on;
        float v[NM];
#pragma unroll
        for (int mi = 0; mi < NM; mi++) {
            v[mi] = 0.0f;
            if (i < n)
#pragma unroll 4
                for (int sp = sub; sp < splits; sp += lanes) v[mi] += __ldcg(&partial[mi * plane + (sp * positions + p) * n_out + o]);
            for (int l = 1; l < lanes; l <<= 1) v[mi] += __shfl_xor_sync(0xffffffffu, v[mi], l);
        }
        if (i < n && sub == 0) emit(p, o, v);
    }
}

// The split-K finish of a matmul's output tile `tile`: its last block adds the partials.
template <int NM, class Emit>
__device__ __forceinline__ void splitk_finish_with(const mm_args_t &a, int64_t tile, int64_t p0, int64_t p1, int64_t o0,
                                                   int64_t o1, Emit emit) {
    if (splitk_last(&a.counters[tile], (unsigned)a.splits))
        splitk_sum_with<NM>(a.partial, a.splits, a.positions, a.n, p0, p1, o0, o1, emit);
}

__device__ __forceinline__ void splitk_finish(const mm_args_t &a, int64_t tile, int64_t p0, int64_t p1, int64_t o0,
                                              int64_t o1) {
    splitk_finish_with<1>(a, tile, p0, p1, o0, o1, [&](int64_t p, int64_t o, const float *v) { a.out[p * a.ldo + o] = v[0]; });
}

// V consecutive floats at p (16-byte aligned when V is 4): a thread's channels of a row.
template <int V> __device__ __forceinline__ void load_v(const float *p, float v[V]) {
    if constexpr (V == 4) {
        float4 f = *(const float4 *)p;
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else
        v[0] = *p;
}

// ---- reductions ------------------------------------------------------------------------------
// A CUDA-core matmul step: 16 weights times 16 activations added in order (matmul_simt.cu and
// the fused mHC pre step, whose partial sums must be the same bits).
__device__ __forceinline__ float dot16(const float *w, const float *x) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) s += w[i] * x[i];
    return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float *red /* 33 floats of shared memory */) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    return red[32];
}

// Copies nrows rows of n floats (row i at rows[i]; NULL: a zero row) into dst with row stride
// ldd, the whole block cooperating. vec (n % 4 == 0, rows 16-byte aligned): 16-byte loads,
// eight per thread in flight before any is stored (the loads are latency-bound otherwise).
__device__ __forceinline__ void load_rows(float *dst, int ldd, const float *const *rows, int nrows, int n, bool vec) {
    int per = vec ? n / 4 : n, total = nrows * per, step = blockDim.x;
    for (int base = threadIdx.x; base < total; base += 8 * step) {
        float4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int x = base + u * step;
            const float *p = x < total ? rows[x / per] : NULL;
            if (!p) v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            else if (vec) v[u] = __ldg((const float4 *)p + x % per);
            else v[u].x = __ldg(p + x % per);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int x = base + u * step;
            if (x >= total) break;
            float *o = dst + (x / per) * ldd + (x % per) * (vec ? 4 : 1);
            o[0] = v[u].x;
            if (vec) o[1] = v[u].y, o[2] = v[u].z, o[3] = v[u].w;
        }
    }
}

// Row j of a paged store (kernels.h): its page's address from the table, then the row in the page.
__device__ __forceinline__ const float *paged_row(const float *const *pages, int64_t ld, int64_t j) {
    return pages[j >> K_PAGE_SHIFT] + (j & ((1 << K_PAGE_SHIFT) - 1)) * ld;
}

// Asks L2 for entries [k0, k1) of a page table, entry k0 + x by thread x of `threads` (a
// prefetch hands nothing back: it may come before pdl_wait, nothing stale can be read).
__device__ __forceinline__ void prefetch_pages(const float *const *pages, int64_t k0, int64_t k1, int x, int threads) {
    const int per_line = 128 / sizeof(void *);
    for (int64_t k = (k0 & ~(int64_t)(per_line - 1)) + (int64_t)x * per_line; k < k1; k += (int64_t)threads * per_line)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(pages + k));
}

// Indexer row b's sequence: from the table, or row b of the one sequence of the scalar fields.
__device__ __forceinline__ ix_row_t ix_row(const ix_args_t &a, int64_t b) {
    if (a.rows) return a.rows[b];
    return ix_row_t{a.keys, a.ldk, a.nk, b, a.pos0 + b};
}

// The start of an indexer scores block over entries [j_begin, j_end) of row b: the row (rd),
// the entries it sees (nvis), its scores row (out), this block's page-table entries asked of L2
// while the kernel before drains, the wait. A block wholly past the row's entries writes -inf
// there and is done (false).
__device__ __forceinline__ bool ix_block_begin(const ix_args_t &a, int64_t b, int64_t j_begin, int64_t j_end, ix_row_t &rd,
                                               int64_t &nvis, float *&out) {
    rd = ix_row(a, b); /* the row table came by a copy, complete before this launch */
    nvis = min(rd.nk, (rd.pos + 1) / a.ratio);
    const int tid = threadIdx.x, nt = blockDim.x;
    if (j_begin < nvis) prefetch_pages(rd.keys, j_begin >> K_PAGE_SHIFT, ((min(nvis, j_end) - 1) >> K_PAGE_SHIFT) + 1, tid, nt);
    pdl_begin();
    out = a.scores + b * a.nk_max;
    if (j_begin < nvis) return true;
    for (int64_t j = j_begin + tid; j < j_end; j += nt) out[j] = -INFINITY;
    return false;
}

__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }

// The experts' activation silu(min(g, limit)) * clamp(u, -limit, limit) (limit <= 0: none), fp32
// (k_moe_act and the fused up projections of matmul_tcs).
__device__ __forceinline__ float moe_act_dev(float g, float u, float limit) {
    if (limit > 0) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
    }
    return g / (1.0f + expf(-g)) * u;
}
