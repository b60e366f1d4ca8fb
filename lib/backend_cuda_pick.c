/* The pick op on the CUDA backend: every row chooses on the device, so only token ids (and the
 * log-probabilities asked for) cross to the host. Greedy rows and temperature rows that walk in id
 * order (no top-k below their allowed count, no top-p) take kernels/sample.cu; rows that rank their
 * tokens (top-k, top-p) take kernels/sample_rank.cu: those with a top-k of at most K_RANK_FIRST from
 * their first ranks, the others in launches of at most RANK_ROWS rows (its sort holds two 8-byte
 * keys per token of each row); log-probabilities (kernels/logprob.cu) follow from the chosen tokens.
 * A row the device hands back (its largest z is not finite) takes the host sampler (the reference)
 * on its downloaded logits. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(logprob_out_t) == sizeof(frame_logprob_t) && K_MAX_TOP == FRAME_MAX_TOP,
               "logprob_out_t mirrors frame_logprob_t");

#define RANK_ROWS 16

/* The tokens a mask allows (every token without one). */
static int64_t allowed_count(const uint32_t *mask, int64_t V) {
    if (!mask) return V;
    int64_t n = 0, words = V / 32;
    for (int64_t w = 0; w < words; w++) n += __builtin_popcount(mask[w]);
    if (V % 32) n += __builtin_popcount(mask[words] & ((1u << (V % 32)) - 1));
    return n;
}

/* Whether sp ranks its tokens (the host sampler's `ranked || selected`), and then how many the
 * mask allows in *allowed (counted only for such rows: a mask is V / 32 words). */
static bool ranks(const sampler_params_t *sp, const uint32_t *mask, int64_t V, int64_t *allowed) {
    if (sampler_greedy(sp) || (sp->top_k <= 0 && sp->top_p >= 1.0)) return false;
    *allowed = allowed_count(mask, V);
    return (sp->top_k > 0 && sp->top_k < *allowed) || sp->top_p < 1.0;
}

/* Rows of tab[0..n) that take their first ranks (when not `whole`): a top-k of at most
 * K_RANK_FIRST, or top-p with no top-k below the allowed count (which answers -3 when its
 * nucleus is past those ranks) to the front; their count in *nf, the top-k ones in *nk. */
static void first_rows(rank_row_t *tab, int n, int64_t V, bool whole, int *nk, int *nf) {
    *nk = *nf = 0;
    if (whole || !k_pick_ranked_first_ok(V)) return;
    for (int pass = 0; pass < 2; pass++)
        for (int i = *nf; i < n; i++) {
            bool topk = tab[i].top_k > 0 && tab[i].top_k <= K_RANK_FIRST;
            bool topp = tab[i].top_p < 1.0 && (tab[i].top_k <= 0 || tab[i].top_k >= tab[i].allowed);
            if (pass == 0 ? !topk : !topp || topk) continue;
            rank_row_t t = tab[*nf];
            tab[(*nf)++] = tab[i], tab[i] = t;
        }
    for (int i = 0; i < *nf; i++) *nk += tab[i].top_k > 0 && tab[i].top_k <= K_RANK_FIRST;
}

/* The ranked rows tab[0..n): those that take their first ranks in a launch a kind, the others
 * (all when `whole`) in launches of RANK_ROWS, each sorting its rows whole. */
static void pick_ranked(cuda_t *c, bk_tensor_t logits, rank_row_t *tab, int n, const uint32_t *dmasks, int32_t *dout, bool whole) {
    int64_t V = logits.cols;
    int nk, nf;
    first_rows(tab, n, V, whole, &nk, &nf);
    for (int kind = 0; kind < 2; kind++) { /* top-k rows, then top-p rows */
        const rank_row_t *t = kind ? tab + nk : tab;
        int m = kind ? nf - nk : nk;
        if (!m) continue;
        const rank_row_t *dtab = cu_upload_table(c, t, (size_t)m * sizeof *t);
        void *scratch = cu_scratch(c, k_pick_ranked_first_scratch(V, m));
        CU(k_pick_ranked_first(dout, logits.ptr, logits.ld, V, dtab, m, dmasks, kind, scratch, c->stream));
        cu_release_scratch(c, (void *)dtab), cu_release_scratch(c, scratch);
    }
    tab += nf, n -= nf;
    if (n <= 0) return;
    int64_t most = n < RANK_ROWS ? n : RANK_ROWS;
    size_t tmp_bytes = 0;
    CU(k_pick_ranked(NULL, NULL, 0, V, NULL, (int)most, NULL, NULL, NULL, NULL, &tmp_bytes, c->stream));
    uint64_t *keys = cu_scratch(c, (size_t)(most * V) * sizeof *keys), *sorted = cu_scratch(c, (size_t)(most * V) * sizeof *sorted);
    void *tmp = cu_scratch(c, tmp_bytes);
    cu_direct_begin(c); /* the sort's library launches its own kernels: nothing of it can be recorded */
    for (int i = 0; i < n; i += RANK_ROWS) {
        int k = n - i < RANK_ROWS ? n - i : RANK_ROWS;
        const rank_row_t *dtab = cu_upload_table(c, tab + i, (size_t)k * sizeof *tab);
        CU(k_pick_ranked(dout, logits.ptr, logits.ld, V, dtab, k, dmasks, keys, sorted, tmp, &tmp_bytes, c->stream));
        cu_release_scratch(c, (void *)dtab);
    }
    cu_direct_end(c);
    cu_release_scratch(c, keys), cu_release_scratch(c, sorted), cu_release_scratch(c, tmp);
}

/* The log-probabilities of rows lpr[0..nl) at the chosen tokens dout into dlp. */
static void logprobs(cuda_t *c, bk_tensor_t logits, const logprob_row_t *lpr, int nl, const int32_t *dout, logprob_out_t *dlp) {
    if (!nl) return;
    const logprob_row_t *dlpr = cu_upload_table(c, lpr, (size_t)nl * sizeof *lpr);
    void *parts = cu_scratch(c, k_logprobs_scratch(logits.cols, nl));
    CU(k_logprobs(dlp, logits.ptr, logits.ld, logits.cols, dlpr, nl, dout, parts, c->stream));
    cu_release_scratch(c, (void *)dlpr), cu_release_scratch(c, parts);
}

/* The answers on the host, through page-locked memory (a copy to pageable memory waits on a
 * staging copy): n tokens into got, nl log-probability entries into lps. */
static void collect(cuda_t *c, const int32_t *dout, int32_t *got, int n, const logprob_out_t *dlp, logprob_out_t *lps, int nl) {
    size_t got_bytes = (size_t)n * sizeof *got, lps_bytes = (size_t)nl * sizeof *lps;
    cu_direct_begin(c); /* what was recorded runs first */
    uint8_t *room = cu_pinned_room(c, got_bytes + lps_bytes);
    CU(cudaMemcpyAsync(room ? room : (uint8_t *)got, dout, got_bytes, cudaMemcpyDeviceToHost, c->stream));
    if (nl) CU(cudaMemcpyAsync(room ? room + got_bytes : (uint8_t *)lps, dlp, lps_bytes, cudaMemcpyDeviceToHost, c->stream));
    cu_direct_end(c);
    cu_sync(c);
    if (room) memcpy(got, room, got_bytes), memcpy(lps, room + got_bytes, lps_bytes);
}

void cu_pick(backend_t *bk, bk_tensor_t logits, const bk_pick_t *rows, int n, sampler_t *scratch) {
    cuda_t *c = cu_of(bk);
    cu_join_all(c);
    if (c->one_graph) die("CUDA backend: pick inside a graph capture (the tokens are needed at once)");
    if (n <= 0) return;
    int64_t V = logits.cols, words = (V + 31) / 32;
    pick_row_t *walk = xmalloc((size_t)n * sizeof *walk);
    rank_row_t *rank = xmalloc((size_t)n * sizeof *rank);
    logprob_row_t *lpr = xmalloc((size_t)n * sizeof *lpr);
    int32_t *got = xmalloc((size_t)n * sizeof *got);
    logprob_out_t *lps = xmalloc((size_t)n * sizeof *lps);
    int n_masks = 0, nw = 0, nr = 0, nl = 0;
    for (int i = 0; i < n; i++) n_masks += rows[i].mask != NULL;
    uint32_t *masks = xmalloc((size_t)(n_masks * words + 1) * sizeof *masks);
    n_masks = 0;
    for (int i = 0; i < n; i++) {
        const sampler_params_t *sp = rows[i].sp;
        int64_t off = -1, allowed = 0;
        if (rows[i].mask) {
            off = n_masks++ * words;
            memcpy(masks + off, rows[i].mask, (size_t)words * sizeof *masks);
        }
        double u = sampler_uniform(sp->seed, rows[i].position);
        if (ranks(sp, rows[i].mask, V, &allowed))
            rank[nr++] = (rank_row_t){.temperature = sp->temperature, .top_p = sp->top_p, .min_p = sp->min_p, .u = u,
                                      .row = i, .mask_off = off, .top_k = sp->top_k, .allowed = allowed, .slot = i};
        else
            walk[nw++] = (pick_row_t){.temperature = sp->temperature, .min_p = sp->min_p, .u = u, .row = i, .mask_off = off,
                                      .greedy = sampler_greedy(sp), .slot = i};
        if (sp->logprobs && rows[i].lp) lpr[nl++] = (logprob_row_t){.row = i, .slot = i, .n_top = sp->top_logprobs};
    }
    cu_prof_begin(c, "pick (device)");
    const uint32_t *dmasks = n_masks ? cu_upload_table(c, masks, (size_t)(n_masks * words) * sizeof *masks) : NULL;
    int32_t *dout = cu_scratch(c, (size_t)n * sizeof *dout);
    logprob_out_t *dlp = nl ? cu_scratch(c, (size_t)nl * sizeof *dlp) : NULL;
    if (nw) {
        const pick_row_t *dwalk = cu_upload_table(c, walk, (size_t)nw * sizeof *walk);
        void *parts = cu_scratch(c, k_pick_scratch(V, nw));
        CU(k_pick(dout, logits.ptr, logits.ld, V, dwalk, nw, dmasks, parts, c->stream));
        cu_release_scratch(c, (void *)dwalk), cu_release_scratch(c, parts);
    }
    if (nr) pick_ranked(c, logits, rank, nr, dmasks, dout, false);
    logprobs(c, logits, lpr, nl, dout, dlp);
    collect(c, dout, got, n, dlp, lps, nl);
    /* top-p rows whose nucleus was past their first ranks (-3): sorted whole, with their log-probabilities */
    int nre = 0, nl2 = 0;
    for (int j = 0; j < nr; j++)
        if (got[rank[j].slot] == -3) rank[nre++] = rank[j];
    if (nre) {
        logprob_row_t *lpr2 = xmalloc((size_t)nl * sizeof *lpr2 + 1);
        int *at = xmalloc((size_t)nl * sizeof *at + 1);
        for (int j = 0; j < nl; j++)
            if (got[lpr[j].slot] == -3) at[nl2] = j, lpr2[nl2++] = lpr[j];
        pick_ranked(c, logits, rank, nre, dmasks, dout, true);
        logprobs(c, logits, lpr2, nl2, dout, dlp);
        logprob_out_t *lps2 = xmalloc((size_t)nl2 * sizeof *lps2 + 1);
        collect(c, dout, got, n, dlp, lps2, nl2);
        for (int j = 0; j < nl2; j++) lps[at[j]] = lps2[j];
        free(lpr2), free(at), free(lps2);
    }
    cu_prof_end(c);
    if (dmasks) cu_release_scratch(c, (void *)dmasks);
    cu_release_scratch(c, dout);
    if (dlp) cu_release_scratch(c, dlp);
    for (int i = 0; i < n; i++) *rows[i].token = got[i] < 0 ? SAMPLER_NONE : (uint32_t)got[i];
    for (int j = 0; j < nl; j++) { /* the entries the host sampler writes: the chosen token's and n_top alternatives */
        frame_logprob_t *lp = rows[lpr[j].slot].lp;
        if (got[lpr[j].slot] < 0) continue;
        lp->logprob = lps[j].logprob, lp->n_top = lps[j].n_top;
        memcpy(lp->top_ids, lps[j].top_ids, lps[j].n_top * sizeof *lp->top_ids);
        memcpy(lp->top_logprobs, lps[j].top_logprobs, lps[j].n_top * sizeof *lp->top_logprobs);
    }
    float *row = NULL;
    for (int i = 0; i < n; i++) { /* rows handed back: the host sampler on their logits */
        if (got[i] != -2) continue;
        if (!row) row = xmalloc((size_t)V * sizeof *row);
        bk->download(bk, row, bk_rows(logits, i, 1));
        *rows[i].token = sampler_pick(scratch, rows[i].sp, row, rows[i].position, rows[i].mask, rows[i].lp);
    }
    free(row), free(walk), free(rank), free(lpr), free(got), free(lps), free(masks);
}
