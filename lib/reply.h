/* Frames a stage writes about a request it read: the same id and seq, the request's trace with
 * this stage's hop appended (read at in_us, written now). The model stages (prefill and decode
 * engines) hand such frames to their caller through a frame_emit_fn, so they work over any
 * transport. */
#ifndef DI_REPLY_H
#define DI_REPLY_H

#include "frame.h"

#include <stdint.h>

/* Receives a frame the engine is done with; the engine frees it when the call returns. */
typedef void (*frame_emit_fn)(void *ctx, frame_t *f);

void reply_init(frame_t *out, frame_type_t type, const frame_t *req, const char *stage, uint64_t in_us);

/* An error frame for req, with its meta when it has one. */
void reply_error(frame_t *out, const frame_t *req, const char *stage, uint64_t in_us, const char *code,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Hands f to emit, then frees it. */
void reply_emit(frame_emit_fn emit, void *ctx, frame_t *f);
/* The error frame for req with this code and message, handed to emit. */
void reply_refuse(frame_emit_fn emit, void *ctx, const frame_t *req, const char *stage, uint64_t in_us, const char *code,
                  const char *msg);

#endif
