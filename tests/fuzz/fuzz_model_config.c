/* libFuzzer target: any byte string as config.json. Either a validated config with a
 * consistent schedule, or an error message; never a crash or an out-of-range index. */
#include "model_config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static model_config_t c;
    char err[256];
    err[0] = 0;
    if (model_config_parse((const char *)data, size, &c, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    for (int L = 0; L < c.n_layers; L++) {
        const layer_sched_t *s = &c.layers[L];
        if (s->kv_source >= c.n_layers || s->topk_source >= c.n_layers || s->engram >= c.n_engram) abort();
        if (s->ratio && (s->kv_source < 0 || s->kv_source > L)) abort();
    }
    return 0;
}
