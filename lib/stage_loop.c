#include "stage_loop.h"
#include "log.h"

#include <stdlib.h>

static void send_error(frame_out_t *out, const char *stage, const char *id, uint64_t seq, const frame_meta_t *meta,
                       const char *code, const char *message, uint64_t in_us, stage_stats_t *stats) {
    frame_t e;
    frame_make_error(&e, id, seq, stage, code, message);
    if (meta) {
        e.has_meta = true;
        frame_meta_copy(&e.meta, meta);
    }
    frame_add_hop(&e, stage, in_us, wall_us());
    frame_out_send(out, &e);
    frame_free(&e);
    stats->errors++;
}

/* Reads and dispatches one frame; false when there was none (idle, or the input ended). */
static bool take_one(const stage_engine_t *e, frame_in_t *in, frame_out_t *out, stage_stats_t *stats, bool *ended,
                     bool *failed) {
    frame_t f;
    in_bad_t bad;
    in_result_t r = frame_in_poll(in, &f, &bad, e->idle(e->engine) ? -1 : 0);
    if (r == IN_IDLE) return false;
    if (r == IN_END || r == IN_FATAL) {
        if (r == IN_FATAL) log_error("%s", bad.reason);
        *failed = r == IN_FATAL;
        *ended = true;
        return false;
    }
    uint64_t in_us = wall_us(), t0 = now_ns();
    if (r == IN_BAD) {
        if (bad.id) send_error(out, e->stage, bad.id, bad.seq, NULL, "bad_frame", bad.reason, in_us, stats);
        else {
            log_error("unreadable frame (no request id): %s", bad.reason);
            stats->bad_input++;
        }
        free(bad.id);
    } else if (f.type == e->takes) {
        e->submit(e->engine, &f, in_us);
    } else if (e->misrouted && f.type == e->misrouted) {
        stats->requests++;
        send_error(out, e->stage, f.id, f.seq, f.has_meta ? &f.meta : NULL, "misrouted", e->misrouted_msg, in_us, stats);
    } else {
        frame_add_hop(&f, e->stage, in_us, wall_us());
        frame_out_send(out, &f);
    }
    frame_free(&f);
    stats->busy_ns += now_ns() - t0;
    return true;
}

bool stage_loop(const stage_engine_t *e, frame_in_t *in, frame_out_t *out, stage_stats_t *stats) {
    bool ended = false, failed = false;
    for (;;) {
        while (!ended && e->has_room(e->engine) && take_one(e, in, out, stats, &ended, &failed)) {}
        if (e->idle(e->engine)) {
            if (ended) break;
            continue;
        }
        uint64_t t0 = now_ns();
        e->step(e->engine);
        stats->busy_ns += now_ns() - t0;
    }
    return !failed;
}
