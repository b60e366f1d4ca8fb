/* RoPE inverse frequencies (MODEL_V41.md §5.5): the main table (rope_theta, no scaling) for
 * ratio-0 layers and the compress table (compress_rope_theta with YaRN) for every ratio>0
 * layer. Computed in fp32 the way transformers builds its buffers (default and yarn rope
 * initializers, "truncate" on), so the tables are bit-identical to HF's. No YaRN magnitude
 * factor (attention_factor 1). Rotation itself is a backend op: adjacent channel pairs
 * (2p, 2p+1) of the last rope_dim channels, angle = position * f_p in fp32. */
#ifndef DI_ROPE_H
#define DI_ROPE_H

#include "model_config.h"

/* Writes c->rope_dim / 2 frequencies. */
void rope_inv_freq(const model_config_t *c, rope_table_t table, float *out);

#endif
