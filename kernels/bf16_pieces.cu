// fp32 rows as bf16 pieces for the tensor-core attention and indexer: each key row is split
// once here instead of once per query row that reads it. Piece t of store row x holds the bf16
// of what pieces 0..t-1 left of the row's values; inexact[x] says whether any piece past the
// first is non-zero (with QAT on, FP8/FP4 keys are exact in one bf16, and the kernels skip the
// products with zero pieces). One warp per row, four floats per lane at a time.
#include "common.cuh"

__global__ void __launch_bounds__(128) bf16_pieces_kernel(pieces_args_t a) {
    pdl_begin();
    const piece_seg_t sg = a.segs[blockIdx.y];
    int64_t j = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (j >= sg.rows) return;
    int lane = threadIdx.x & 31;
    const float *src = sg.pages ? paged_row(sg.pages, sg.ld, j) : sg.src + (sg.mod ? (sg.first + j) % sg.mod : j) * sg.ld;
    int64_t x = sg.dst0 + j;
    bool rest = false;
    for (int c = 4 * lane; c < a.cols; c += 128) {
        float v[4];
        if (a.vec) {
            float4 f = __ldg((const float4 *)(src + c));
            v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = __ldg(src + c + e);
        }
        for (int t = 0; t < a.pieces; t++) {
            __nv_bfloat162 h0 = __floats2bfloat162_rn(v[0], v[1]), h1 = __floats2bfloat162_rn(v[2], v[3]);
            *(uint2 *)(a.store + ((int64_t)t * a.store_rows + x) * a.cols + c) = make_uint2(*(uint32_t *)&h0, *(uint32_t *)&h1);
            float2 f0 = __bfloat1622float2(h0), f1 = __bfloat1622float2(h1);
            v[0] -= f0.x, v[1] -= f0.y, v[2] -= f1.x, v[3] -= f1.y;
            if (t == 0) rest |= v[0] != 0.0f || v[1] != 0.0f || v[2] != 0.0f || v[3] != 0.0f;
        }
    }
    rest = __any_sync(0xffffffffu, rest);
    if (lane == 0) a.inexact[x] = rest && a.pieces > 1;
}

extern "C" cudaError_t k_bf16_pieces(const pieces_args_t *a, cudaStream_t s) {
    if (a->n_segs <= 0 || a->most <= 0) return cudaSuccess;
    if (a->cols % 4 || a->pieces < 1 || a->pieces > 3 || a->n_segs > 65535) return cudaErrorInvalidValue;
    return k_launch(bf16_pieces_kernel, dim3((unsigned)ceil_div(a->most, 4), (unsigned)a->n_segs), 128, 0, s, *a);
}
