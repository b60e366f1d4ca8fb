/* libFuzzer target: any byte string as a safetensors file image. Parsing must either fail
 * with a message or expose tensors whose bytes all lie inside the image (ASan checks the
 * reads below); dequantizing a tensor as the model would must stay inside it too. */
#include "dequant.h"
#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy, so any overread is outside the allocation */
    uint8_t *img = malloc(size ? size : 1);
    memcpy(img, data, size);
    char err[256];
    st_archive_t *a = st_from_memory(img, size, "fuzz", err, sizeof err);
    if (!a) {
        if (!err[0]) abort(); /* a rejection must say why */
    } else {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < st_count(a); i++) {
            const st_tensor_t *t = st_tensor_at(a, i);
            if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
            if (st_find(a, t->name) != t) abort();
            /* F8_E4M3 / BF16 / F32 matrices: dequantize row 0 with unit block scales */
            if (t->ndim == 2 && t->shape[0] > 0 && t->shape[1] > 0 && t->shape[1] <= 4096 &&
                (t->dtype == ST_F8_E4M3 || t->dtype == ST_BF16 || t->dtype == ST_F32)) {
                uint8_t one[4096 / 32 + 1]; /* one block row of E8M0 1.0 */
                memset(one, 127, sizeof one);
                wmat_t m = {.kind = t->dtype == ST_F32 ? WQ_F32 : t->dtype == ST_BF16 ? WQ_BF16 : WQ_FP8,
                            .rows = t->shape[0], .cols = t->shape[1], .data = t->data, .scale = one,
                            .block_rows = (int)t->shape[0], .block_cols = 32};
                float *row = malloc((size_t)t->shape[1] * sizeof *row);
                wmat_rows(&m, 0, 1, row);
                sink ^= (uint8_t)(row[0] != row[0]);
                free(row);
            }
        }
        (void)sink;
        st_close(a);
    }
    free(img);
    return 0;
}
