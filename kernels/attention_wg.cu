// Sparse attention with sink (MODEL_V41 §5.9, K = V) on wgmma for prefill in plain bf16 (one
// piece of q and of the probabilities; attention_tc.cu takes the other precisions and shapes).
// One block of two warpgroups per query row; the row's heads (at most 64, padded with zero
// queries) are wgmma's 64-row M side, and its key list (window rows, then selected pool rows)
// passes through shared memory in tiles of 32 keys, copied asynchronously two tiles ahead of the
// one being multiplied (gathered rows: the copies' latency, not their bandwidth, bounds a tile).
// q is converted to bf16 once, into the 128-byte swizzle; a key tile lies in the same swizzle
// in chunks of 64 channels, which serve both products:
//   S = Q K^T   warpgroup w sums its half of the channels (m64n32k16, both operands in shared
//               memory); the halves meet in shared memory and both warpgroups add them in the
//               same order, so both hold the same S;
//   softmax     online, in fp32, in registers, in base 2: a row's 32 logits lie on the 4 threads
//               of a quad; the running maximum starts at the sink (its 2^(sink - m) in the
//               denominator); it runs while the tensor cores do the previous tile's P V;
//   O += P V    warpgroup w the channels of its half (m64nDHk16): the probabilities, rounded to
//               bf16, are the A fragments as the S accumulators lie, V the key tile read
//               MN-major (transposed).
// Nothing depends on the other rows of the launch.
#include "attention_keys.cuh"
#include "tc_frag.cuh"
#include "wgmma.cuh"

#define AW_THREADS 256
#define AW_NB 4   // key buffers
#define AW_SLD 40 // floats per row of a warpgroup's partial logits: 32 + 8
#define AW_LOG2E 1.4426950408889634f // the softmax in base 2: logits and sinks times log2 e

extern "C" int k_attention_wg_ok(int heads, int d) { return heads >= 1 && heads <= 64 && (d == 128 || d == 256 || d == 512); }

// Q [d / 64 chunks][64 heads][128 B], AW_NB key buffers [d / 64][32 keys][128 B], the partial
// logits [2][64][AW_SLD], the buffers' key masks; + room to align to the swizzle's 1024 bytes.
static size_t aw_smem(int d) { return (size_t)d / 64 * (8192 + AW_NB * 4096) + 2 * 64 * AW_SLD * 4 + AW_NB * 4 + 1024; }

// Byte offset of 16-byte unit u (8 channels) of row `row` in a [chunk][rows][128 B] swizzled tile.
__device__ __forceinline__ uint32_t aw_at(int row, int u, int rows) {
    return (uint32_t)((u >> 3) * rows * 128 + row * 128 + (((u & 7) ^ (row & 7)) << 4));
}

// A tile's copies: thread t copies key t / 8 (AW_TPK threads a key), its 16-byte units t % 8 +
// 8 i, so that a thread looks up one key a tile and its units lie 4,096 bytes apart in the
// swizzle (with consecutive units a thread, each unit had a key of its own to look up: eight
// lookups and addresses a thread a tile).
#define AW_TPK (AW_THREADS / AT_KT)
static_assert(AW_TPK == 8, "a key's 8 threads cover the 8 units of a 128-byte swizzle row");

// The lookups of the tile to copy next, fetched a tile before the copies that use them (fetched
// and used at once, each lookup cost the copying threads a memory latency: 17% of the stalls,
// ncu run 141): this thread's key's selection entry and, in warp 0, its lane's key's.
struct aw_fetch_t {
    int32_t sel, lane_sel;
};

// Key u's selection entry (only read for the keys past the window).
__device__ __forceinline__ int32_t aw_sel(const at_keys_t &ks, int64_t u) {
    return u >= ks.nwin && u - ks.nwin < ks.n_sel ? __ldg(ks.sel + (u - ks.nwin)) : 0;
}
// Key u's store row, or -1, from its selection entry j.
__device__ __forceinline__ int64_t aw_row(const at_keys_t &ks, int64_t u, int32_t j) {
    if (u < ks.nwin) return ks.wrow + u;
    return u - ks.nwin < ks.n_sel && j >= 0 && j < ks.pool_rows ? ks.pool + j : -1;
}

__device__ __forceinline__ void aw_fetch(const at_keys_t &ks, int tile, aw_fetch_t &f) {
    int64_t u0 = (int64_t)tile * AT_KT;
    f.sel = aw_sel(ks, u0 + threadIdx.x / AW_TPK);
    f.lane_sel = threadIdx.x < 32 ? aw_sel(ks, u0 + threadIdx.x) : 0;
}

// The keys of tile `tile` (their first bf16 piece) into the key buffer at kbuf, one commit group;
// their mask into *valid (warp 0).
template <int D>
__device__ __forceinline__ void aw_issue(const attn_tc_args_t &a, const at_keys_t &ks, const aw_fetch_t &f, uint8_t *kbuf,
                                         unsigned *valid, int tile) {
    int64_t u0 = (int64_t)tile * AT_KT;
    int kk = threadIdx.x / AW_TPK, l8 = threadIdx.x % AW_TPK;
    int64_t row = aw_row(ks, u0 + kk, f.sel);
    const uint16_t *src = row >= 0 ? a.store + row * D + l8 * 8 : a.store;
    uint8_t *dst = kbuf + aw_at(kk, l8, AT_KT);
#pragma unroll
    for (int i = 0; i < D / 64; i++) tc_cp16(dst + i * AT_KT * 128, row >= 0 ? src + i * 64 : src, row >= 0);
    tc_cp_commit();
    if (threadIdx.x < 32) {
        unsigned v = __ballot_sync(0xffffffffu, aw_row(ks, u0 + threadIdx.x, f.lane_sel) >= 0);
        if (threadIdx.x == 0) *valid = v;
    }
}

__device__ __forceinline__ uint32_t aw_pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Issues this warpgroup's half of S = Q K^T for the key tile at kt (its channels' 64-chunks),
// into s (zeroed first), one commit group.
template <int DH> __device__ __forceinline__ void aw_logits(float (&s)[16], uint32_t qa, const uint8_t *kt, int wg) {
#pragma unroll
    for (int i = 0; i < 16; i++) s[i] = 0.0f;
    uint32_t ka = (uint32_t)__cvta_generic_to_shared(kt);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < DH / 16; kk++) {
        int k16 = wg * (DH / 16) + kk, chunk = k16 >> 2, off = (k16 & 3) * 32;
        wgmma_ss(s, sw128_desc(qa + chunk * 8192 + off), sw128_desc(ka + chunk * 4096 + off));
    }
    wg_commit();
}

// Issues O += P V for the key tile at kt, this warpgroup's channels, one commit group.
template <int DH> __device__ __forceinline__ void aw_pv(float (&o)[DH / 2], const uint32_t (&pa)[2][4], const uint8_t *kt, int wg) {
    uint32_t ka = (uint32_t)__cvta_generic_to_shared(kt);
    wg_fence();
#pragma unroll
    for (int j = 0; j < 2; j++) wgmma_rs<1>(o, pa[j], sw128_mn_desc(ka + wg * (DH / 64) * 4096 + j * 2048, 4096));
    wg_commit();
}

// The two warpgroups' halves of a tile's logits summed through shared memory (both add them in
// the same order, so both hold the same S), masked and scaled to base 2; then the online
// softmax: a row's logits on the four threads of its quad, the probabilities into s, each row's
// rescale factor into al (the maximum starts at the sink, so it is finite and a masked logit's
// exp2 is 0).
__device__ __forceinline__ void aw_softmax(float (&s)[16], float *sx, unsigned vmask, float scale2, float (&mrun)[2], float (&zrun)[2],
                                           float (&al)[2], int h0, int wg, int q4) {
    float *mine = sx + wg * 64 * AW_SLD;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        *(float2 *)(mine + h0 * AW_SLD + 8 * i + 2 * q4) = make_float2(s[4 * i], s[4 * i + 1]);
        *(float2 *)(mine + (h0 + 8) * AW_SLD + 8 * i + 2 * q4) = make_float2(s[4 * i + 2], s[4 * i + 3]);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int x = 0; x < 2; x++) {
            int off = (h0 + 8 * x) * AW_SLD + 8 * i + 2 * q4, kk = 8 * i + 2 * q4;
            float2 p0 = *(const float2 *)(sx + off), p1 = *(const float2 *)(sx + 64 * AW_SLD + off);
            s[4 * i + 2 * x] = vmask >> kk & 1 ? (p0.x + p1.x) * scale2 : -INFINITY;
            s[4 * i + 2 * x + 1] = vmask >> (kk + 1) & 1 ? (p0.y + p1.y) * scale2 : -INFINITY;
        }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        float mx = mrun[x];
#pragma unroll
        for (int i = 0; i < 4; i++) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * x], s[4 * i + 2 * x + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float zs = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &l = s[4 * i + 2 * x + e];
                l = exp2f(l - mx);
                zs += l;
            }
        zs += __shfl_xor_sync(0xffffffffu, zs, 1);
        zs += __shfl_xor_sync(0xffffffffu, zs, 2);
        al[x] = exp2f(mrun[x] - mx);
        zrun[x] = zrun[x] * al[x] + zs, mrun[x] = mx;
    }
}

// O's rows times their factors; once the maxima settle most tiles leave every factor at exactly
// 1, and a warp skips the multiplies.
template <int DH> __device__ __forceinline__ void aw_rescale(float (&o)[DH / 2], const float (&al)[2]) {
    if (!__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) return;
#pragma unroll
    for (int i = 0; i < DH / 8; i++)
#pragma unroll
        for (int x = 0; x < 2; x++) o[4 * i + 2 * x] *= al[x], o[4 * i + 2 * x + 1] *= al[x];
}

// The probabilities as the bf16 A fragments of P V (keys 16 j.. of the tile), as the S
// accumulators lie.
__device__ __forceinline__ void aw_pack_p(const float (&s)[16], uint32_t (&pa)[2][4]) {
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) pa[j][e] = aw_pack(s[8 * j + 2 * e], s[8 * j + 2 * e + 1]);
}

#endif

template <int DH> // channels a warpgroup: d = 2 DH
__global__ void __launch_bounds__(AW_THREADS, 1) attn_wg_kernel(attn_tc_args_t a) {
    pdl_begin();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = 2 * DH, CH = D / 64;
    extern __shared__ uint8_t aw_smem_raw[];
    uint32_t raw0 = (uint32_t)__cvta_generic_to_shared(aw_smem_raw), base = (raw0 + 1023) & ~1023u;
    uint8_t *sm = aw_smem_raw + (base - raw0);
    uint8_t *qs = sm, *kb0 = sm + CH * 8192;
    float *sx = (float *)(kb0 + AW_NB * CH * 4096);
    unsigned *valid = (unsigned *)(sx + 2 * 64 * AW_SLD);
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, q4 = lane & 3;

    int64_t r;
    const at_keys_t keys = at_keys_of(a, blockIdx.x, r);
    /* at least one tile: with no key at all it is all masked (the sink alone) */
    int ntiles = (int)max((keys.nwin + keys.n_sel + AT_KT - 1) / AT_KT, (int64_t)1);
    aw_fetch_t fetched; /* the lookups of the next tile to copy */
    for (int t = 0; t < AW_NB - 1; t++) { /* one commit group a tile, empty past the last */
        aw_fetch(keys, t, fetched);
        if (t < ntiles) aw_issue<D>(a, keys, fetched, kb0 + t * CH * 4096, valid + t, t);
        else tc_cp_commit();
    }
    aw_fetch(keys, AW_NB - 1, fetched);

    // q as bf16 (heads past a.heads zero), 8 channels a thread at a time: four units' loads in
    // flight before their stores (a store between would keep the next load waiting)
    const float *qrow = a.q + r * a.ldq;
    constexpr int QU = 64 * (D / 8) / AW_THREADS; // 16-byte units of bf16 q a thread
    static_assert(QU % 4 == 0, "whole batches of four units");
    for (int b0 = 0; b0 < QU; b0 += 4) {
        float v[4][8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = tid + (b0 + j) * AW_THREADS, h = c / (D / 8), u = c - h * (D / 8);
            const float *src = qrow + h * D + u * 8;
#pragma unroll
            for (int e = 0; e < 8; e++) v[j][e] = 0.0f;
            if (h < a.heads && a.vec) {
                float4 x = __ldg((const float4 *)src), y = __ldg((const float4 *)src + 1);
                v[j][0] = x.x, v[j][1] = x.y, v[j][2] = x.z, v[j][3] = x.w, v[j][4] = y.x, v[j][5] = y.y, v[j][6] = y.z, v[j][7] = y.w;
            } else if (h < a.heads) {
#pragma unroll
                for (int e = 0; e < 8; e++) v[j][e] = __ldg(src + e);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = tid + (b0 + j) * AW_THREADS, h = c / (D / 8), u = c - h * (D / 8);
            *(uint4 *)(qs + aw_at(h, u, 64)) =
                make_uint4(aw_pack(v[j][0], v[j][1]), aw_pack(v[j][2], v[j][3]), aw_pack(v[j][4], v[j][5]), aw_pack(v[j][6], v[j][7]));
        }
    }
    fence_async_smem(); // the stores of q, read by wgmma

    // this thread's rows (heads) h0 and h0 + 8: running maximum (from the sink) and denominator,
    // in base 2 (the logits scaled by log2 e: one exp2 a probability)
    const int h0 = warp * 16 + g;
    const float scale2 = a.scale * AW_LOG2E;
    float mrun[2], zrun[2] = {1.0f, 1.0f};
#pragma unroll
    for (int x = 0; x < 2; x++) mrun[x] = h0 + 8 * x < a.heads ? a.sink[h0 + 8 * x] * AW_LOG2E : 0.0f;
    float o[DH / 2];
#pragma unroll
    for (int i = 0; i < DH / 2; i++) o[i] = 0.0f;

    // Tile t's logits are softmaxed while the tensor cores run tile t - 1's O += P V: an
    // iteration issues S of tile t + 1 and P V of tile t, waits for the first, sums and
    // softmaxes it, then waits for the second and rescales O. Every wgmma is issued and waited
    // in straight-line code (a tile without keys runs as one of zero probabilities): a product
    // issued conditionally or in flight across the loop's edge makes ptxas serialize them all.
    const uint32_t qa = (uint32_t)__cvta_generic_to_shared(qs);
    float s[16], al[2];
    uint32_t pa[2][4];
    tc_cp_wait_newest<AW_NB - 2>(); /* tile 0 */
    fence_async_smem();
    __syncthreads();
    aw_logits<DH>(s, qa, kb0, wg);
    wg_wait<0>();
    fence_regs(s);
    aw_softmax(s, sx, valid[0], scale2, mrun, zrun, al, h0, wg, q4);
    aw_pack_p(s, pa);
    for (int t = 0; t + 1 < ntiles; t++) {
        tc_cp_wait_newest<AW_NB - 3>(); /* tile t + 1 */
        fence_async_smem();
        __syncthreads(); /* tile t + 1 has landed; everyone is done with tile t - 1 (its buffer is next) */
        const int next = (t + AW_NB - 1) % AW_NB;
        if (t + AW_NB - 1 < ntiles) aw_issue<D>(a, keys, fetched, kb0 + next * CH * 4096, valid + next, t + AW_NB - 1);
        else tc_cp_commit();
        if (t + AW_NB < ntiles) aw_fetch(keys, t + AW_NB, fetched);
        const uint8_t *kt = kb0 + (t % AW_NB) * CH * 4096;
        aw_logits<DH>(s, qa, kb0 + ((t + 1) % AW_NB) * CH * 4096, wg);
        aw_pv<DH>(o, pa, kt, wg);
        wg_wait<1>();
        fence_regs(s);
        aw_softmax(s, sx, valid[(t + 1) % AW_NB], scale2, mrun, zrun, al, h0, wg, q4);
        wg_wait<0>();
        fence_regs(o);
        aw_rescale<DH>(o, al);
        aw_pack_p(s, pa);
    }
    aw_pv<DH>(o, pa, kb0 + ((ntiles - 1) % AW_NB) * CH * 4096, wg);
    wg_wait<0>();
    fence_regs(o);
    tc_cp_wait();

    // out = O / z
#pragma unroll
    for (int x = 0; x < 2; x++) {
        int h = h0 + 8 * x;
        if (h >= a.heads) continue;
        float iz = 1.0f / zrun[x];
        float *orow = a.out + r * a.ldo + (int64_t)h * D + wg * DH;
#pragma unroll
        for (int i = 0; i < DH / 8; i++) *(float2 *)(orow + 8 * i + 2 * q4) = make_float2(o[4 * i + 2 * x] * iz, o[4 * i + 2 * x + 1] * iz);
    }
#else
    __trap(); // built for sm_90a only (wgmma)
#endif
}

template <int DH> static cudaError_t launch(const attn_tc_args_t *a, cudaStream_t s) {
    size_t smem = aw_smem(2 * DH);
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(attn_wg_kernel<DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    return k_launch(attn_wg_kernel<DH>, (unsigned)a->m, AW_THREADS, smem, s, *a);
}

extern "C" cudaError_t k_attention_wg(const attn_tc_args_t *a, cudaStream_t s) {
    if (a->m <= 0) return cudaSuccess;
    if (!k_attention_wg_ok(a->heads, a->d) || a->pieces != 1 || a->m > 0x7FFFFFFF || a->n_spans <= 0 || a->ldo % 2)
        return cudaErrorInvalidValue;
    return a->d == 512 ? launch<256>(a, s) : a->d == 256 ? launch<128>(a, s) : launch<64>(a, s);
}
