#include "reply.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>

void reply_init(frame_t *out, frame_type_t type, const frame_t *req, const char *stage, uint64_t in_us) {
    frame_init(out, type);
    out->id = req->id ? xstrdup(req->id) : NULL;
    out->seq = req->seq;
    for (uint32_t i = 0; i < req->n_hops; i++) frame_add_hop(out, req->hops[i].stage, req->hops[i].in_us, req->hops[i].out_us);
    frame_add_hop(out, stage, in_us, wall_us());
}

void reply_error(frame_t *out, const frame_t *req, const char *stage, uint64_t in_us, const char *code,
                 const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    reply_init(out, FRAME_ERROR, req, stage, in_us);
    out->stage = xstrdup(stage);
    out->code = xstrdup(code);
    out->message = xstrdup(message);
    if (req->has_meta) {
        out->has_meta = true;
        frame_meta_copy(&out->meta, &req->meta);
    }
}

void reply_emit(frame_emit_fn emit, void *ctx, frame_t *f) {
    emit(ctx, f);
    frame_free(f);
}

void reply_refuse(frame_emit_fn emit, void *ctx, const frame_t *req, const char *stage, uint64_t in_us, const char *code,
                  const char *msg) {
    frame_t e;
    reply_error(&e, req, stage, in_us, code, "%s", msg);
    reply_emit(emit, ctx, &e);
}
