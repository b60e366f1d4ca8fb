/* The per-sequence state as bytes (docs/STATE.md): a versioned little-endian layout that the
 * prefill process ships to decode. It carries the model fingerprint, so a state made by another
 * model (or config, or token map) is refused; every count in it is checked against the model
 * and the position before anything is allocated, and a corrupt or truncated buffer gives an
 * error naming what was wrong, never a crash.
 *
 * With QAT on, window rows, pool entries and indexer keys are stored in the formats the QAT
 * simulation makes lossless (FP8 E4M3 rows with UE8M0 scales per 32: 528 B per 512-wide row;
 * FP4 E2M1 entries with E4M3 scales per 16: 288 B; FP4 keys with UE8M0 scales per 32: 68 B),
 * each section checked to decode bit-exactly before it is written packed (else it is written
 * as fp32). Serialize -> deserialize -> serialize reproduces the bytes. */
#ifndef DI_SEQSTATE_IO_H
#define DI_SEQSTATE_IO_H

#include "seqstate.h"
#include "util.h"

#include <stddef.h>

#define SEQSTATE_MAGIC   "DISTATE\n"
#define SEQSTATE_VERSION 1
#define SEQSTATE_MAX_T   ((int64_t)1 << 40)

/* Appends the state's bytes to out. */
void seqstate_serialize(const seqstate_t *st, buf_t *out);

/* T as the header of a version-1 state states it, or -1 when the bytes do not start with one:
 * for sizing work before the state is read (nothing else is checked; deserialize checks all). */
int64_t seqstate_peek_positions(const void *data, size_t len);

/* A new state for model m from len bytes. NULL with the reason in err. */
seqstate_t *seqstate_deserialize(const model_t *m, const void *data, size_t len, char *err, size_t errlen);

#endif
