// The key list of a query row of the tensor-core attention kernels (attention_tc.cu,
// attention_wg.cu): its window rows, then its selected pool rows, as rows of the key store
// (bf16 pieces, bf16_pieces.cu).
#pragma once

#include "common.cuh"

#define AT_KT 32 // keys per tile

// The store row of the row's key u, or -1 (past the list, a -1 selection, an entry outside the pool).
struct at_keys_t {
    int64_t nwin, wrow, n_sel, pool, pool_rows;
    const int32_t *sel;
    __device__ __forceinline__ int64_t row(int64_t u) const {
        if (u < nwin) return wrow + u;
        u -= nwin;
        if (u >= n_sel) return -1;
        int32_t j = __ldg(sel + u);
        return j >= 0 && j < pool_rows ? pool + j : -1;
    }
};

// Launch row b's query row r and its keys (its span's window and pool).
__device__ __forceinline__ at_keys_t at_keys_of(const attn_tc_args_t &a, int64_t b, int64_t &r) {
    int si = 0;
    while (si + 1 < a.n_spans && a.spans[si + 1].b0 <= b) si++;
    const attn_tc_span_t sp = a.spans[si];
    int64_t k = b - sp.b0, i = sp.pos0 + k;
    int64_t lo = max(max(sp.win_lo, i - a.window + 1), sp.wstart);
    r = sp.r0 + k;
    at_keys_t keys;
    keys.nwin = i >= lo ? i - lo + 1 : 0;
    keys.wrow = sp.base + lo - sp.wstart;
    keys.n_sel = a.sel ? a.n_sel : 0;
    keys.sel = a.sel ? a.sel + r * a.ld_sel : NULL;
    keys.pool = sp.pool, keys.pool_rows = sp.pool_rows;
    return keys;
}

// Which keys of the tile exist, and whether any needs pieces past the first (warp 0).
__device__ __forceinline__ void at_meta(const attn_tc_args_t &a, const at_keys_t &ks, unsigned *meta, int tile) {
    int lane = threadIdx.x & 31;
    int64_t row = ks.row((int64_t)tile * AT_KT + lane);
    unsigned valid = __ballot_sync(0xffffffffu, row >= 0);
    bool more = __any_sync(0xffffffffu, a.pieces > 1 && row >= 0 && a.inexact[row]);
    if (lane == 0) meta[0] = valid, meta[1] = more;
}
