/* The prefill -> decode hand-off: state-frame bytes per prompt token, and the time to
 * serialize a state, move its frame over ZeroMQ (ipc and tcp loopback) and deserialize it on the
 * other side. A receiver thread reads frames with the stages' own transport (lib/io.h), decodes
 * them and deserializes each state; the sender serializes and writes. Throughput is of the
 * whole chain; the serialize and deserialize times are also given alone.
 *
 *   state_bench [--model DIR] [--prompt N] [--frames N] [--threads N] [--qat on|off] */
#include "backend_cpu.h"
#include "forward.h"
#include "io.h"
#include "seqstate_io.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const model_t *model;
static int64_t n_frames;

typedef struct {
    frame_in_t *in; /* opened by the main thread (the transport's ZeroMQ context is made there) */
    uint64_t deserialize_ns;
} receiver_t;

static void *receive(void *p) {
    receiver_t *r = p;
    frame_in_t *in = r->in;
    char err[256];
    for (int64_t k = 0; k < n_frames; k++) {
        frame_t f;
        in_bad_t bad;
        if (frame_in_next(in, &f, &bad) != IN_FRAME) die("receiver: %s", bad.reason);
        uint64_t t0 = now_ns();
        seqstate_t *st = seqstate_deserialize(model, f.state, f.state_len, err, sizeof err);
        r->deserialize_ns += now_ns() - t0;
        if (!st) die("receiver: %s", err);
        seqstate_free(st);
        frame_free(&f);
    }
    frame_in_free(in);
    return NULL;
}

/* Seconds to serialize, send, receive and deserialize n_frames states over spec. */
static double transfer(const seqstate_t *st, const char *bind, const char *connect, size_t *frame_bytes, double *deser_s) {
    cli_common_t common = {.in = bind, .out = connect, .hwm = 16, .eos_timeout = 5, .idle_timeout = 10};
    receiver_t r = {frame_in_open(bind, &common), 0};
    pthread_t th;
    pthread_create(&th, NULL, receive, &r);
    frame_out_t *out = frame_out_open(connect, &common, "state_bench");
    uint64_t t0 = now_ns();
    for (int64_t k = 0; k < n_frames; k++) {
        frame_t f;
        frame_init(&f, FRAME_STATE);
        f.id = xstrdup("bench");
        f.tokens = xmalloc(4);
        f.tokens[0] = 0;
        f.n_tokens = 1;
        buf_t bytes = {0};
        seqstate_serialize(st, &bytes);
        f.state = bytes.data, f.state_len = bytes.len;
        frame_out_send(out, &f);
        if (frame_bytes) {
            buf_t enc = {0};
            frame_encode(&f, &enc);
            *frame_bytes = enc.len;
            buf_free(&enc);
            frame_bytes = NULL;
        }
        frame_free(&f);
    }
    pthread_join(th, NULL);
    double s = (double)(now_ns() - t0) / 1e9;
    ledger_t none = {0};
    frame_out_finish(out, &none);
    *deser_s = (double)r.deserialize_ns / 1e9;
    return s;
}

int main(int argc, char **argv) {
    const char *model_dir = "data/models/tiny-v41";
    int64_t n = 512, threads = 0;
    bool qat = true;
    n_frames = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x = 0;
        if (!v) die("%s needs a value", a);
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--qat")) qat = strcmp(v, "off") != 0;
        else if (!parse_i64(v, 1, 1 << 30, &x)) die("%s needs a number", a);
        else if (!strcmp(a, "--prompt")) n = x;
        else if (!strcmp(a, "--frames")) n_frames = x;
        else if (!strcmp(a, "--threads")) threads = x;
        else die("unknown argument %s (see the comment at the top of bench/state_bench.c)", a);
        i++;
    }
    char err[1024];
    backend_t *bk = backend_cpu_create((int)threads);
    model_t m;
    if (model_open(&m, model_dir, bk, NULL, err, sizeof err)) die("%s", err);
    model = &m;
    uint32_t *ids = xmalloc((size_t)n * 4);
    uint64_t x = 7;
    for (int64_t i = 0; i < n; i++) x = x * 6364136223846793005ull + 1, ids[i] = (uint32_t)((x >> 33) % (uint64_t)m.cfg.vocab_size);
    seqstate_t *st = seqstate_new(&m, qat);
    if (forward_prompt(st, ids, n, -1, 0, FWD_LOGITS_NONE, NULL, NULL, err, sizeof err)) die("%s", err);
    buf_t bytes = {0};
    enum { REPS = 50 };
    uint64_t t0 = now_ns();
    for (int r = 0; r < REPS; r++) buf_clear(&bytes), seqstate_serialize(st, &bytes);
    double ser = (double)(now_ns() - t0) / 1e9 / REPS;
    printf("model %s, QAT %s, prompt %lld tokens: state %zu bytes (%.1f per prompt token); serialize %.3f ms, %.0f MB/s\n",
           model_dir, qat ? "on" : "off", (long long)n, bytes.len, (double)bytes.len / (double)n, ser * 1e3,
           (double)bytes.len / ser / 1e6);
    char path[64], bind_ipc[96], conn_ipc[96];
    snprintf(path, sizeof path, "/tmp/di-state-bench-%d", (int)getpid());
    snprintf(bind_ipc, sizeof bind_ipc, "@ipc://%s", path);
    snprintf(conn_ipc, sizeof conn_ipc, "ipc://%s", path);
    const char *names[2] = {"ipc", "tcp loopback"}, *binds[2] = {bind_ipc, "@tcp://:47311"},
               *conns[2] = {conn_ipc, "tcp://127.0.0.1:47311"};
    for (int k = 0; k < 2; k++) {
        size_t fb = 0;
        double deser = 0, s = transfer(st, binds[k], conns[k], &fb, &deser);
        printf("%-12s %lld frames of %zu bytes: %.3f ms per state serialized, sent, received and deserialized "
               "(%.0f MB/s, %.0f states/s; deserialize alone %.3f ms)\n",
               names[k], (long long)n_frames, fb, s / (double)n_frames * 1e3, (double)fb * (double)n_frames / s / 1e6,
               (double)n_frames / s, deser / (double)n_frames * 1e3);
    }
    unlink(path);
    io_shutdown();
    buf_free(&bytes);
    seqstate_free(st);
    free(ids);
    model_close(&m);
    bk->destroy(bk);
    return 0;
}
