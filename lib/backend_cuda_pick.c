/* The pick op on the CUDA backend: greedy rows and temperature rows without top-k, top-p or
 * log-probabilities choose on the device (kernels/sample.cu), so only their token ids cross to
 * the host; the other rows download their logits and take the host sampler (the reference). */
#include "backend_cuda_internal.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static bool on_device(const sampler_params_t *sp) {
    return !sp->logprobs && (sampler_greedy(sp) || (sp->top_k <= 0 && sp->top_p >= 1.0));
}

void cu_pick(backend_t *bk, bk_tensor_t logits, const bk_pick_t *rows, int n, sampler_t *scratch) {
    cuda_t *c = cu_of(bk);
    if (c->capturing) die("CUDA backend: pick inside a graph capture (the tokens are needed at once)");
    int64_t V = logits.cols, words = (V + 31) / 32;
    pick_row_t *tab = xmalloc((size_t)(n + 1) * sizeof *tab);
    int32_t *got = xmalloc((size_t)(n + 1) * sizeof *got);
    int nd = 0, n_masks = 0;
    for (int i = 0; i < n; i++) n_masks += on_device(rows[i].sp) && rows[i].mask;
    uint32_t *masks = xmalloc((size_t)(n_masks * words + 1) * sizeof *masks);
    n_masks = 0;
    for (int i = 0; i < n; i++) {
        const sampler_params_t *sp = rows[i].sp;
        if (!on_device(sp)) continue;
        int64_t off = -1;
        if (rows[i].mask) {
            off = n_masks++ * words;
            memcpy(masks + off, rows[i].mask, (size_t)words * sizeof *masks);
        }
        tab[nd++] = (pick_row_t){.temperature = sp->temperature, .min_p = sp->min_p,
                                 .u = sampler_uniform(sp->seed, rows[i].position), .row = i, .mask_off = off,
                                 .greedy = sampler_greedy(sp)};
    }
    if (nd) {
        cu_prof_begin(c, "pick (device)");
        const pick_row_t *dtab = cu_upload_table(c, tab, (size_t)nd * sizeof *tab);
        const uint32_t *dmasks = n_masks ? cu_upload_table(c, masks, (size_t)(n_masks * words) * sizeof *masks) : NULL;
        int32_t *dout = cu_scratch(c, (size_t)nd * sizeof *dout);
        CU(k_pick(dout, logits.ptr, logits.ld, V, dtab, nd, dmasks, c->stream));
        cu_prof_end(c);
        bk->download(bk, got, (bk_tensor_t){dout, BK_I32, 1, nd, nd});
        cu_release_scratch(c, (void *)dtab);
        if (dmasks) cu_release_scratch(c, (void *)dmasks);
        cu_release_scratch(c, dout);
        for (int j = 0; j < nd; j++) *rows[tab[j].row].token = got[j] < 0 ? SAMPLER_NONE : (uint32_t)got[j];
    }
    if (nd < n) { /* the host sampler on the rest */
        float *row = xmalloc((size_t)V * sizeof *row);
        for (int i = 0; i < n; i++) {
            if (on_device(rows[i].sp)) continue;
            bk->download(bk, row, bk_rows(logits, i, 1));
            *rows[i].token = sampler_pick(scratch, rows[i].sp, row, rows[i].position, rows[i].mask, rows[i].lp);
        }
        free(row);
    }
    free(tab), free(got), free(masks);
}
