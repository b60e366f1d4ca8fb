// Matmul for a narrow F32 weight (at most MN_WARPS * MN_OUT outputs: the mHC mixes, 24 x 20480
// for hc 4) over many positions (prefill). The CUDA-core matmul takes such a weight 16 outputs
// per block and stages every position's activations once per group, so most of its blocks wait
// on the same rows (1.15 ms an 8k-token call, against 0.16 ms for reading the activations once).
// Here a block takes MN_ROWS positions and every output: their activations are staged once, a
// step of 512 columns at a time with the weights' same columns (both copied asynchronously a
// step ahead), and each warp sums its outputs against them.
//
// The sums are mm_simt_kernel's unsplit ones, bit for bit: lane l adds the 16-column dot
// products of columns l * 16 + 512 j in ascending j, and the warp adds its lanes (warp_sum).
// Nothing depends on the other positions of the launch.
#include "tc_frag.cuh"

#define MN_WARPS 8
#define MN_OUT 3     // outputs a warp at most
#define MN_ROWS 24   // positions a block (even): 48 KB of activations and 48 KB of weights a step, two steps in flight
#define MN_STEP 512  // columns a step: 16 a lane
#define MN_STAGE ((MN_ROWS + MN_WARPS * MN_OUT) * MN_STEP) // floats of a staged step
static_assert((MN_ROWS + MN_WARPS * MN_OUT) % (MN_WARPS * 32 / (MN_STEP / 4)) == 0, "whole copy rounds");

extern "C" int k_matmul_narrow_ok(const mm_args_t *a) {
    return a->w.kind == KW_F32 && a->n <= MN_WARPS * MN_OUT && a->k > 0 && a->k == a->w.cols && a->k % 16 == 0 &&
           (uintptr_t)a->w.data % 16 == 0 && !a->wtab && !a->x_rows && !a->x_group_n && a->splits == 1 && !a->partial &&
           !a->route.idx && a->x_vec;
}

// Staged column e of a step (e < MN_STEP) in four planes, so that a lane's 16 columns are four
// conflict-free 16-byte reads (matmul_simt.cu's plane_slot).
__device__ __forceinline__ int mn_slot(int e) { return ((e & 15) >> 2) * (MN_STEP / 4) + (e >> 4) * 4 + (e & 3); }

__global__ void __launch_bounds__(MN_WARPS * 32) mm_narrow_kernel(mm_args_t a) {
    extern __shared__ __align__(16) float mn_sm[]; // [2][MN_ROWS activation rows, then MN_WARPS * MN_OUT weight rows][MN_STEP]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, e = lane * 16;
    const int64_t p0 = (int64_t)blockIdx.x * MN_ROWS;
    const int np = (int)min((int64_t)MN_ROWS, a.m - p0), steps = (int)((a.k + MN_STEP - 1) / MN_STEP);
    const float *W = (const float *)a.w.data + a.row0 * a.k;
    float acc[MN_OUT][MN_ROWS];
#pragma unroll
    for (int i = 0; i < MN_OUT; i++)
#pragma unroll
        for (int r = 0; r < MN_ROWS; r++) acc[i][r] = 0.0f;
    auto stage = [&](int st) { /* step st into buffer st & 1 (zeros past the rows, outputs and reduction) */
        int64_t c0 = (int64_t)st * MN_STEP;
        int n4 = (int)(min((int64_t)MN_STEP, a.k - c0) >> 2);
        float *sm = mn_sm + (st & 1) * MN_STAGE;
        // thread t copies float4 f = t % 128 of rows t / 128 + 2 u, unrolled: ncu put most stalls on
        // each copy waiting for the one before to release its address registers (run 125), though
        // unrolling left the kernel's time as it was (run 126)
        const int f = threadIdx.x % (MN_STEP / 4), r0 = threadIdx.x / (MN_STEP / 4), RS = MN_WARPS * 32 / (MN_STEP / 4);
#pragma unroll
        for (int u = 0; u < (MN_ROWS + MN_WARPS * MN_OUT) / RS; u++) {
            int r = r0 + RS * u;
            const float *row = r < MN_ROWS ? (r < np ? a.x + (p0 + r) * a.ldx : NULL) : r - MN_ROWS < a.n ? W + (r - MN_ROWS) * a.k : NULL;
            bool ok = row && f < n4;
            tc_cp16(sm + r * MN_STEP + mn_slot(4 * f), ok ? (const float4 *)(row + c0) + f : (const float4 *)a.x, ok);
        }
        tc_cp_commit();
    };
    pdl_begin();
    stage(0);
    for (int st = 0; st < steps; st++) {
        tc_cp_wait();    /* this thread's copies of step st */
        __syncthreads(); /* everyone's; and step st - 1 is done with the other buffer */
        if (st + 1 < steps) stage(st + 1);
        int64_t c0 = (int64_t)st * MN_STEP;
        if (e >= a.k - c0) continue; /* the lane's columns end before the step's: it adds nothing, as mm_simt_kernel's */
        const float *xs = mn_sm + (st & 1) * MN_STAGE, *ws = xs + MN_ROWS * MN_STEP;
        float wv[MN_OUT][16];
#pragma unroll
        for (int i = 0; i < MN_OUT; i++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float4 f = *(const float4 *)(ws + (warp + MN_WARPS * i) * MN_STEP + q * (MN_STEP / 4) + (e >> 4) * 4);
                wv[i][4 * q] = f.x, wv[i][4 * q + 1] = f.y, wv[i][4 * q + 2] = f.z, wv[i][4 * q + 3] = f.w;
            }
        // two rows at a time, their six 16-product chains interleaved (each chain is dot16's: fused
        // products added in column order from 0): one chain alone waits on every product
#pragma unroll
        for (int r = 0; r < MN_ROWS; r += 2) {
            float xv[2][16], d[MN_OUT][2];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float4 f = *(const float4 *)(xs + (r + h) * MN_STEP + q * (MN_STEP / 4) + (e >> 4) * 4);
                    xv[h][4 * q] = f.x, xv[h][4 * q + 1] = f.y, xv[h][4 * q + 2] = f.z, xv[h][4 * q + 3] = f.w;
                }
#pragma unroll
            for (int i = 0; i < MN_OUT; i++) d[i][0] = d[i][1] = 0.0f;
#pragma unroll
            for (int c = 0; c < 16; c++)
#pragma unroll
                for (int i = 0; i < MN_OUT; i++) d[i][0] = __fmaf_rn(wv[i][c], xv[0][c], d[i][0]), d[i][1] = __fmaf_rn(wv[i][c], xv[1][c], d[i][1]);
#pragma unroll
            for (int i = 0; i < MN_OUT; i++)
                if (warp + MN_WARPS * i < a.n) acc[i][r] += d[i][0], acc[i][r + 1] += d[i][1];
        }
    }
#pragma unroll
    for (int i = 0; i < MN_OUT; i++) {
        int o = warp + MN_WARPS * i;
#pragma unroll
        for (int r = 0; r < MN_ROWS; r++) {
            float v = warp_sum(acc[i][r]);
            if (lane == 0 && o < a.n && r < np) a.out[(p0 + r) * a.ldo + o] = v;
        }
    }
}

extern "C" cudaError_t k_matmul_narrow(const mm_args_t *a, cudaStream_t s) {
    const int smem = 2 * MN_STAGE * sizeof(float);
    static bool raised;
    if (!k_matmul_narrow_ok(a)) return cudaErrorInvalidValue;
    if (a->m <= 0 || a->n <= 0) return cudaSuccess;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(mm_narrow_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    return k_launch(mm_narrow_kernel, (unsigned)ceil_div(a->m, MN_ROWS), MN_WARPS * 32, smem, s, *a);
}
