/* Frame transports. A stage reads frames from one input and writes frames to one output;
 * each is "-" (stdin/stdout byte stream) or a ZeroMQ endpoint:
 *
 *   tcp://HOST:PORT  ipc://PATH      connect (">" prefix accepted too, as in CZMQ)
 *   @tcp://HOST:PORT @ipc://PATH     bind; "@tcp://:PORT" binds 127.0.0.1, "*" binds all
 *   A,B,...                          one socket bound/connected to each listed endpoint
 *
 * Inputs are PULL sockets, outputs PUSH sockets, so N processes can share a stage.
 * End-of-stream frames are consumed here and kept in a ledger (ledger.h): frame_in_next
 * returns IN_END once the input is complete. */
#ifndef DI_IO_H
#define DI_IO_H

#include "cli.h"
#include "frame.h"
#include "ledger.h"

typedef struct frame_in frame_in_t;
typedef struct frame_out frame_out_t;

typedef enum {
    IN_IDLE = 2,  /* frame_in_poll: nothing arrived in time */
    IN_FRAME = 1, /* *f holds a frame */
    IN_END = 0,   /* input complete (or closed); see frame_in_ledger */
    IN_BAD = -1,  /* one malformed frame, skipped; bad->reason says why, bad->id names it if known */
    IN_FATAL = -2 /* the input cannot continue (corrupt byte stream); bad->reason says why */
} in_result_t;

typedef struct {
    char reason[256];
    char *id;     /* request id of the bad frame when it could be read, else NULL; caller frees */
    uint64_t seq;
} in_bad_t;

/* Transfer counters, for --stats. */
typedef struct {
    uint64_t frames, bytes, bad;
    uint64_t by_type[FRAME_TYPE_LAST + 1];
} io_counters_t;

/* Both die with a one-line reason on a malformed endpoint or one that cannot be bound. */
frame_in_t *frame_in_open(const char *spec, const cli_common_t *common);
in_result_t frame_in_next(frame_in_t *in, frame_t *f, in_bad_t *bad);
/* The same, waiting at most timeout_ms (0: only what is already there; -1: for ever): a stage
 * with work in hand (a decode batch) checks for new frames between steps. */
in_result_t frame_in_poll(frame_in_t *in, frame_t *f, in_bad_t *bad, int timeout_ms);
const ledger_t *frame_in_ledger(const frame_in_t *in);
const io_counters_t *frame_in_counters(const frame_in_t *in);
/* Stops receiving (upstream sees the disconnect), keeps the ledger readable. */
void frame_in_close(frame_in_t *in);
void frame_in_free(frame_in_t *in);

frame_out_t *frame_out_open(const char *spec, const cli_common_t *common, const char *stage);
/* Writes one frame; backpressure blocks here. Dies if the output is gone. */
void frame_out_send(frame_out_t *out, const frame_t *f);
/* Writes the end-of-stream frame (origin and announced count from the ledger, served from
 * what this output carried), closes and frees out. With no ledger heard, no eos is written. */
void frame_out_finish(frame_out_t *out, const ledger_t *ledger);
const io_counters_t *frame_out_counters(const frame_out_t *out);
/* Requests this output served: terminal frames (request, state, done, error) written. */
uint64_t frame_out_served(const frame_out_t *out);

/* Call once at exit after closing everything: waits for queued socket frames to leave. */
void io_shutdown(void);

/* Terminal frames end a request's life on one hop; the ledger counts them. */
bool frame_is_terminal(frame_type_t t);

#endif
