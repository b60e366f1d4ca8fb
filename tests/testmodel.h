/* Models for the model tests: tiny di-mkmodel checkpoints in temporary folders, and the
 * committed goldens they are checked against (tests/data/golden, tests/golden/README.md). */
#ifndef DI_TESTMODEL_H
#define DI_TESTMODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define T_GOLDEN "tests/data/golden"

/* Writes di-mkmodel's checkpoint of preset, vocab and seed into dir (made when missing): FP8/FP4
 * weights when quantized, else bf16. 0, or -1 with the reason in err. */
int t_tiny_model(const char *dir, const char *preset, int64_t vocab, uint64_t seed, bool quantized, char *err,
                 size_t errlen);
/* Removes a temporary folder and everything in it. */
void t_remove_tree(const char *dir);

/* index.json's entry for a configuration ("tiny-a"), or NULL. */
json_t *t_golden_config(const json_t *index, const char *name);
/* A token sequence of a configuration's entry ("long", "repeat"): *n ids. */
uint32_t *t_golden_sequence(const json_t *config, const char *which, size_t *n);
/* The golden <config>.<key>.f32, want floats; NULL when missing or of another size. */
float *t_golden_floats(const char *config, const char *key, size_t want);

#endif
