/* Deterministic tiny DeepSeek-V4.1 checkpoints for tests: the released structure scaled down,
 * in the official layout (MODEL_V41.md §1, §3), generated from a seed.
 *
 * Presets (both with the V4.1 schedule's features: SWA layers, a ratio-2 encoder whose first
 * compressed layer is a Full KV/index source followed by Reuse layers, a ratio-1 decoder whose
 * first layer is KV, index and candidate source, Reindex and Reuse layers after it, two Engram
 * layers, 3 trailing DSpark zeros in compress_ratios):
 *   "a"  8 layers (4 encoder + 4 decoder: 0-1 SWA, 1 Engram, 2 Full r2 + Engram, 3 Reuse,
 *        4 Full r1 + candidate, 5 Reuse, 6 Reindex, 7 Reuse); hidden 128, 4 heads x 64,
 *        window 16, 8 experts top-2, candidate blocks 3 x 4, 16 indexer heads, index top-8.
 *   "b"  12 layers (0-1 SWA, 1 Engram, 2 Full r2, 3 Reuse, 4 Full r2 + Engram, 5 Reuse,
 *        6 Full r1 + candidate, 7 Reuse, 8 Reindex, 9 Reuse, 10 Reindex, 11 Reuse); hidden 160,
 *        4 heads x 96, q_lora 80 (partial FP8 tiles), window 24, 6 experts top-3, 20 indexer
 *        heads, candidate blocks 2 x 6, index top-6, 3-gram Engram.
 *   "m"  mid-size, for benchmarks (not tests): 16 layers (0-1 SWA, 2-7 ratio 2 with KV sources 2
 *        and 5, 8-15 ratio 1 from KV source 8, Reindex 11 and 14), hidden 1024, 16 heads x 128,
 *        q_lora 512, 16 experts top-2 of 256, window 64, index top-64 over 4 x 32 candidate
 *        blocks, Engram layers 1 and 5.
 *
 * Files written to the output directory:
 *   config.json            composite HF layout (text_config, quantization_config for fp8)
 *   model.safetensors      or shards + model.safetensors.index.json
 *   engram_token_map.u32   only when vocab != 129280: the stand-in for the tokenizer-derived
 *                          compressed token map (MODEL_V41 §5.2), vocab little-endian uint32
 *                          ids in [0, engram_compressed_vocab_size); with the full vocabulary
 *                          the real tokenizer's map applies (99092 ids), as for the real model.
 *
 * Variants: fp8 stores every tensor as released (dense FP8 32x32 tiles, FP4 experts, FP8
 * Engram tables, all with UE8M0 scales; BF16 and F32 elsewhere). bf16 stores the dequantized
 * values of the same weights in BF16 (exact: e4m3 and e2m1 values times powers of two fit
 * bf16), so both variants are the same model and share goldens.
 *
 * Weights: per tensor a uniform unit-variance stream seeded by (seed, name); linear maps
 * scaled 1/sqrt(fan-in), norms 1 + 0.2r, mHC base 0.5r and scale 1 + 0.3r, sinks r,
 * gate biases 0.3r, embeddings and Engram tables r, Engram q/k weights 1 + 0.3r. */
#ifndef DI_MKMODEL_H
#define DI_MKMODEL_H

#include "model_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MKMODEL_FULL_VOCAB 129280

/* Fills c with a preset ("a" or "b") for the given vocabulary size (>= 16), schedule included. */
int mkmodel_config(const char *preset, int64_t vocab, model_config_t *c, char *err, size_t errlen);

/* Writes the checkpoint for c (quantized per c->quantized: call with it set for fp8, clear for
 * bf16; the FP8 block size is used by both) into dir, which must exist. shards <= 1 writes one file. 0, or -1 with err. */
int mkmodel_write(const model_config_t *c, uint64_t seed, int shards, const char *dir, char *err, size_t errlen);

#endif
