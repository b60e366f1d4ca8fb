/* The sink's bookkeeping (di-detok): per-request answers keyed by seq, the output lines,
 * input order on request, and the final account against the origin's ledger. */
#ifndef DI_SINK_H
#define DI_SINK_H

#include "io.h"
#include "stats.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    bool stream;  /* delta lines as text arrives */
    bool ordered; /* final lines in seq order */
    bool trace;   /* per-stage trace on final lines */
} sink_options_t;

typedef struct sink sink_t;

sink_t *sink_new(const tokenizer_t *tok, FILE *out, sink_options_t opts, stage_stats_t *stats);
void sink_frame(sink_t *s, const frame_t *f);
/* A frame that could not be decoded: an error line when its id is known. */
void sink_bad_frame(sink_t *s, const in_bad_t *bad);
/* Ends every unfinished request and every announced one never seen with an error line.
 * Returns how many requests that was. */
uint64_t sink_finish(sink_t *s, const ledger_t *ledger);
void sink_free(sink_t *s);

#endif
