/* The main loop of a stage whose engine works in steps (di-prefill, di-decode): it reads
 * frames while the engine has room (blocking only when the engine has nothing to do), hands
 * the engine the frames it takes, forwards every other frame with this stage's trace hop,
 * answers with an error frame a frame it cannot read (when its id is known) and a frame that
 * means a stage is missing before this one, and steps the engine between reads. At the end of
 * the input it steps until the engine is idle. */
#ifndef DI_STAGE_LOOP_H
#define DI_STAGE_LOOP_H

#include "io.h"
#include "stats.h"

#include <stdbool.h>

typedef struct {
    const char *stage;
    frame_type_t takes;          /* what the engine consumes */
    frame_type_t misrouted;      /* a type answered with an error here; 0: none */
    const char *misrouted_msg;
    void *engine;
    bool (*has_room)(void *engine);                          /* may take more input now */
    bool (*idle)(void *engine);                              /* nothing to step */
    void (*submit)(void *engine, frame_t *f, uint64_t in_us); /* takes *f */
    void (*step)(void *engine);
} stage_engine_t;

/* Returns false when the input failed (a corrupt byte stream: the reason is logged). */
bool stage_loop(const stage_engine_t *e, frame_in_t *in, frame_out_t *out, stage_stats_t *stats);

#endif
