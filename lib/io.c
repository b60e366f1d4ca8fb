#include "io.h"
#include "log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* ---- endpoints ------------------------------------------------------------------------- */

#define MAX_ENDPOINTS 16

typedef struct {
    bool bind;
    char addr[512];
} endpoint_t;

/* "-", or a comma-separated list of endpoints (one socket bound/connected to each). */
typedef struct {
    bool is_stream;
    int n;
    endpoint_t items[MAX_ENDPOINTS];
} endpoints_t;

static void parse_one(const char *spec, size_t len, const char *flag, endpoint_t *e)
{
    char s_buf[sizeof e->addr];
    if (len >= sizeof s_buf) die("--%s endpoint too long", flag);
    memcpy(s_buf, spec, len);
    s_buf[len] = 0;
    const char *s = s_buf;
    *e = (endpoint_t){0};
    if (*s == '@') e->bind = true, s++;
    else if (*s == '>') s++;
    bool tcp = !strncmp(s, "tcp://", 6), ipc = !strncmp(s, "ipc://", 6);
    if ((!tcp && !ipc) || !s[6])
        die("bad --%s '%s': expected -, tcp://HOST:PORT or ipc://PATH (prefix @ to bind)", flag, s_buf);
    if (tcp) {
        const char *colon = strrchr(s + 6, ':');
        int64_t port;
        if (!colon || !parse_i64(colon + 1, 1, 65535, &port))
            die("bad --%s '%s': tcp endpoints need HOST:PORT with a port in 1..65535", flag, s_buf);
        if (colon == s + 6) {
            if (!e->bind) die("bad --%s '%s': connecting needs a host", flag, s_buf);
            /* Binding defaults to loopback; all interfaces only when asked with "*". */
            char port_part[16];
            snprintf(port_part, sizeof port_part, "%.8s", colon);
            snprintf(e->addr, sizeof e->addr, "tcp://127.0.0.1%s", port_part);
            return;
        }
    }
    memcpy(e->addr, s, strlen(s) + 1); /* fits: s is a suffix of s_buf */
}

static void parse_endpoints(const char *spec, const char *flag, endpoints_t *eps)
{
    *eps = (endpoints_t){0};
    if (!strcmp(spec, "-")) {
        eps->is_stream = true;
        return;
    }
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (eps->n == MAX_ENDPOINTS) die("--%s lists more than %d endpoints", flag, MAX_ENDPOINTS);
        parse_one(p, len, flag, &eps->items[eps->n++]);
        if (!comma) break;
        p = comma + 1;
    }
}

static void *ctx;

static void *zmq_context_if_open(void)
{
    void *c = ctx;
    ctx = NULL;
    return c;
}

static void *zmq_context(void)
{
    if (!ctx) {
        ctx = zmq_ctx_new();
        if (!ctx) die("cannot create a ZeroMQ context: %s", zmq_strerror(errno));
    }
    return ctx;
}

static void *open_socket(int type, const endpoints_t *eps, const cli_common_t *c, const char *flag)
{
    void *s = zmq_socket(zmq_context(), type);
    if (!s) die("cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
    int hwm = (int)c->hwm;
    int64_t max_msg = FRAME_MAX_BYTES;
    zmq_setsockopt(s, type == ZMQ_PULL ? ZMQ_RCVHWM : ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (type == ZMQ_PULL) zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    for (int i = 0; i < eps->n; i++) {
        const endpoint_t *e = &eps->items[i];
        if ((e->bind ? zmq_bind(s, e->addr) : zmq_connect(s, e->addr)) != 0)
            die("cannot %s --%s %s: %s", e->bind ? "bind" : "connect", flag, e->addr, zmq_strerror(errno));
    }
    return s;
}

/* ---- peers ------------------------------------------------------------------------------ */

/* Counts the peers connected to a socket, from its monitor's connect/disconnect events. */
typedef struct {
    void *pair;      /* PAIR socket receiving the events */
    int peers;       /* connected now */
    int peers_seen;  /* connections ever made */
} peer_monitor_t;

static void peer_monitor_open(peer_monitor_t *m, void *sock)
{
    char addr[64];
    snprintf(addr, sizeof addr, "inproc://di-monitor-%p", (void *)m);
    if (zmq_socket_monitor(sock, addr, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
        die("cannot monitor a socket: %s", zmq_strerror(errno));
    m->pair = zmq_socket(zmq_context(), ZMQ_PAIR);
    if (!m->pair || zmq_connect(m->pair, addr) != 0) die("cannot connect a socket monitor: %s", zmq_strerror(errno));
}

/* Apply pending connect/disconnect events to the counts. */
static void peer_monitor_drain(peer_monitor_t *m)
{
    for (;;) {
        zmq_msg_t head, addr;
        zmq_msg_init(&head);
        if (zmq_msg_recv(&head, m->pair, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&head);
            return;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&head) >= 2) memcpy(&event, zmq_msg_data(&head), 2);
        bool more = zmq_msg_more(&head);
        zmq_msg_close(&head);
        if (more) {
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, m->pair, 0);
            zmq_msg_close(&addr);
        }
        if (event == ZMQ_EVENT_CONNECTED || event == ZMQ_EVENT_ACCEPTED) {
            m->peers++;
            m->peers_seen++;
        } else if (event == ZMQ_EVENT_DISCONNECTED && m->peers > 0)
            m->peers--;
    }
}

static void peer_monitor_close(peer_monitor_t *m, void *sock)
{
    zmq_socket_monitor(sock, NULL, 0);
    zmq_close(m->pair);
    m->pair = NULL;
}

bool frame_is_terminal(frame_type_t t)
{
    return t == FRAME_REQUEST || t == FRAME_STATE || t == FRAME_DONE || t == FRAME_ERROR;
}

/* ---- input ----------------------------------------------------------------------------- */

struct frame_in {
    endpoints_t ep;
    void *sock;          /* ZeroMQ, or NULL for the stream */
    peer_monitor_t mon;  /* upstream peers of sock */
    double idle_timeout; /* seconds the input waits with every upstream peer gone */
    uint64_t alone_since;
    buf_t buf;           /* stream bytes not yet consumed, from buf.data[pos] */
    size_t pos;
    size_t rescan_at;    /* bytes needed before an incomplete frame is scanned again */
    bool eof;
    bool closed;
    bool ended;          /* IN_END was returned */
    ledger_t ledger;
    io_counters_t counters;
};

frame_in_t *frame_in_open(const char *spec, const cli_common_t *c)
{
    frame_in_t *in = xcalloc(1, sizeof *in);
    parse_endpoints(spec, "in", &in->ep);
    in->idle_timeout = c->idle_timeout;
    if (!in->ep.is_stream) {
        in->sock = open_socket(ZMQ_PULL, &in->ep, c, "in");
        peer_monitor_open(&in->mon, in->sock);
    }
    return in;
}

/* Internal result: an eos was absorbed and the input goes on. */
#define IN_AGAIN ((in_result_t)(IN_FATAL - 1))

/* Handle one complete message: an eos feeds the ledger, anything else is a frame. */
static in_result_t take_message(frame_in_t *in, const uint8_t *data, size_t len, frame_t *f, in_bad_t *bad)
{
    in->counters.bytes += len;
    if (frame_decode(data, len, f, &bad->id, &bad->seq, bad->reason, sizeof bad->reason) != 0) {
        in->counters.bad++;
        return IN_BAD;
    }
    in->counters.frames++;
    in->counters.by_type[f->type]++;
    if (f->type != FRAME_EOS) return IN_FRAME;
    int rc = ledger_add(&in->ledger, &f->eos, bad->reason, sizeof bad->reason);
    frame_free(f);
    if (rc != 0) return IN_FATAL;
    return ledger_complete(&in->ledger) ? IN_END : IN_AGAIN;
}

/* Waits until fd is readable or timeout_ms passes (-1: for ever); false on timeout. */
static bool wait_readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc;
    do rc = poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc != 0;
}

static in_result_t next_from_stream(frame_in_t *in, frame_t *f, in_bad_t *bad, int timeout_ms)
{
    for (;;) {
        size_t avail = in->buf.len - in->pos;
        /* A frame still incomplete is scanned again only once the bytes have doubled, so a
         * large frame arriving in pipe-sized pieces costs linear time, not quadratic. */
        if (avail && (avail >= in->rescan_at || in->eof)) {
            int64_t n = frame_wire_length(in->buf.data + in->pos, avail, bad->reason, sizeof bad->reason);
            if (n < 0) return IN_FATAL;
            if (n > 0) {
                const uint8_t *msg = in->buf.data + in->pos;
                in->pos += (size_t)n;
                in->rescan_at = 0;
                return take_message(in, msg, (size_t)n, f, bad);
            }
            in->rescan_at = 2 * avail;
        }
        if (in->eof) {
            if (avail) {
                snprintf(bad->reason, sizeof bad->reason, "input ended inside a frame (%zu bytes left)", avail);
                return IN_FATAL;
            }
            return IN_END;
        }
        if (timeout_ms >= 0 && !wait_readable(STDIN_FILENO, timeout_ms)) return IN_IDLE;
        /* Compact, then read more. */
        if (in->pos) {
            memmove(in->buf.data, in->buf.data + in->pos, avail);
            in->buf.len = avail;
            in->pos = 0;
        }
        buf_reserve(&in->buf, avail > (1 << 16) ? avail : (1 << 16));
        ssize_t got = read(STDIN_FILENO, in->buf.data + in->buf.len, in->buf.cap - in->buf.len - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(bad->reason, sizeof bad->reason, "reading stdin: %s", strerror(errno));
            return IN_FATAL;
        }
        if (got == 0) in->eof = true;
        in->buf.len += (size_t)got;
    }
}

/* Upstream gone: peers came, all left, and none came back for --idle-timeout seconds while
 * the input is still incomplete (a worker died, or its eos can never come). */
static bool upstream_gone(frame_in_t *in)
{
    peer_monitor_drain(&in->mon);
    if (!in->mon.peers_seen || in->mon.peers > 0) {
        in->alone_since = 0;
        return false;
    }
    if (!in->alone_since) in->alone_since = now_ns();
    return (double)(now_ns() - in->alone_since) / 1e9 >= in->idle_timeout;
}

static in_result_t next_from_socket(frame_in_t *in, frame_t *f, in_bad_t *bad, int timeout_ms)
{
    uint64_t start = now_ns();
    for (;;) {
        /* Wake at least every 100 ms to notice an upstream that has gone. */
        int left = timeout_ms < 0 ? 100 : timeout_ms - (int)((now_ns() - start) / 1000000);
        if (left < 0) left = 0;
        zmq_pollitem_t item = {.socket = in->sock, .events = ZMQ_POLLIN};
        int rc;
        do rc = zmq_poll(&item, 1, left < 100 ? left : 100);
        while (rc < 0 && errno == EINTR);
        if (rc > 0) break;
        if (upstream_gone(in)) {
            snprintf(bad->reason, sizeof bad->reason, "every upstream peer left %.0f s ago", in->idle_timeout);
            return IN_END;
        }
        if (timeout_ms >= 0 && left == 0) return IN_IDLE;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int rc;
    do rc = zmq_msg_recv(&msg, in->sock, 0);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        zmq_msg_close(&msg);
        snprintf(bad->reason, sizeof bad->reason, "receiving: %s", zmq_strerror(errno));
        return IN_FATAL;
    }
    bool extra = zmq_msg_more(&msg);
    in_result_t r;
    if (extra) {
        /* Drain the rest of the multipart message; this protocol version has one part. */
        zmq_msg_t part;
        zmq_msg_init(&part);
        while (zmq_msg_more(&msg) && zmq_msg_recv(&part, in->sock, 0) >= 0 && zmq_msg_more(&part)) {}
        zmq_msg_close(&part);
        in->counters.bad++;
        snprintf(bad->reason, sizeof bad->reason, "unexpected multipart message (protocol v%d frames are one part)",
                 FRAME_VERSION);
        bad->id = NULL;
        r = IN_BAD;
    } else
        r = take_message(in, zmq_msg_data(&msg), zmq_msg_size(&msg), f, bad);
    zmq_msg_close(&msg);
    return r;
}

in_result_t frame_in_poll(frame_in_t *in, frame_t *f, in_bad_t *bad, int timeout_ms)
{
    for (;;) {
        *bad = (in_bad_t){0};
        if (ledger_complete(&in->ledger) || in->closed || in->ended) return IN_END;
        in_result_t r = in->sock ? next_from_socket(in, f, bad, timeout_ms) : next_from_stream(in, f, bad, timeout_ms);
        if (r == IN_END) {
            in->ended = true;
            const char *sep = bad->reason[0] ? ": " : "";
            if (!in->ledger.heard)
                log_warn("input ended without an end-of-stream frame%s%s (did an upstream stage fail?)", sep, bad->reason);
            else if (!ledger_complete(&in->ledger))
                log_warn("input ended with %llu of %llu announced requests served upstream%s%s",
                         (unsigned long long)in->ledger.served, (unsigned long long)in->ledger.announced, sep,
                         bad->reason);
        }
        if (r != IN_AGAIN) return r;
    }
}

in_result_t frame_in_next(frame_in_t *in, frame_t *f, in_bad_t *bad)
{
    return frame_in_poll(in, f, bad, -1);
}

const ledger_t *frame_in_ledger(const frame_in_t *in)
{
    return &in->ledger;
}

const io_counters_t *frame_in_counters(const frame_in_t *in)
{
    return &in->counters;
}

void frame_in_close(frame_in_t *in)
{
    if (in->sock) {
        peer_monitor_close(&in->mon, in->sock);
        int linger = 0;
        zmq_setsockopt(in->sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(in->sock);
        in->sock = NULL;
    }
    in->closed = true;
}

void frame_in_free(frame_in_t *in)
{
    if (!in) return;
    frame_in_close(in);
    buf_free(&in->buf);
    ledger_free(&in->ledger);
    free(in);
}

/* ---- output ---------------------------------------------------------------------------- */

struct frame_out {
    endpoints_t ep;
    void *sock;
    peer_monitor_t mon;  /* downstream peers of sock */
    int64_t expect_peers;
    double eos_timeout;
    const char *stage;
    buf_t buf;
    uint64_t served;
    io_counters_t counters;
};

frame_out_t *frame_out_open(const char *spec, const cli_common_t *c, const char *stage)
{
    frame_out_t *out = xcalloc(1, sizeof *out);
    parse_endpoints(spec, "out", &out->ep);
    out->eos_timeout = c->eos_timeout;
    out->expect_peers = c->out_peers;
    out->stage = stage;
    if (out->ep.is_stream) {
        signal(SIGPIPE, SIG_IGN); /* a closed pipe becomes a write error we can name */
        return out;
    }
    out->sock = open_socket(ZMQ_PUSH, &out->ep, c, "out");
    peer_monitor_open(&out->mon, out->sock);
    return out;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) die("writing the output: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

static void send_encoded(frame_out_t *out, int flags)
{
    if (!out->sock) {
        write_all(STDOUT_FILENO, out->buf.data, out->buf.len);
        return;
    }
    while (zmq_send(out->sock, out->buf.data, out->buf.len, flags) < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return; /* only with ZMQ_DONTWAIT or a send timeout */
        die("sending on %s: %s", out->ep.items[0].addr, zmq_strerror(errno));
    }
}

void frame_out_send(frame_out_t *out, const frame_t *f)
{
    buf_clear(&out->buf);
    frame_encode(f, &out->buf);
    send_encoded(out, 0);
    out->counters.frames++;
    out->counters.bytes += out->buf.len;
    out->counters.by_type[f->type]++;
    if (frame_is_terminal(f->type)) out->served++;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Offer end-of-stream on a socket. With several peers sharing our PUSH, one copy reaches one
 * of them, so keep offering while any peer is connected: a peer that got it closes its
 * input and disconnects; receivers ignore repeats from the same sender. With --out-peers N,
 * also wait (up to --eos-timeout with nobody connected) for peers that have not come yet. */
static void offer_eos_on_socket(frame_out_t *out)
{
    int timeout_ms = (int)(out->eos_timeout * 1000);
    zmq_setsockopt(out->sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    send_encoded(out, 0);
    if (out->ep.n == 1 && !out->ep.items[0].bind && out->expect_peers <= 1) {
        /* Connected to one endpoint: one peer, and the copy just queued is for it. Offering
         * until it leaves could wait for ever: a sink fed by several workers stays connected
         * while a dead worker's eos is missing. Linger until the copy is delivered. */
        zmq_setsockopt(out->sock, ZMQ_LINGER, &timeout_ms, sizeof timeout_ms);
        return;
    }
    int backoff = 10;
    uint64_t alone_since = 0;
    for (;;) {
        peer_monitor_drain(&out->mon);
        if (out->mon.peers <= 0) {
            if (out->mon.peers_seen >= out->expect_peers) break;
            if (!alone_since) alone_since = now_ns();
            if ((double)(now_ns() - alone_since) / 1e9 > out->eos_timeout) {
                log_warn("only %d of --out-peers %lld connected before --eos-timeout", out->mon.peers_seen,
                         (long long)out->expect_peers);
                break;
            }
        } else
            alone_since = 0;
        sleep_ms(backoff);
        backoff = backoff < 500 ? backoff * 2 : 500;
        send_encoded(out, ZMQ_DONTWAIT);
    }
    /* Peers that came and left took their eos (they leave once their input is complete), so
     * the copies still queued for them are spare. If nobody ever came, queued frames get
     * eos_timeout to reach a peer that connects late. */
    int linger = out->mon.peers_seen ? 0 : timeout_ms;
    zmq_setsockopt(out->sock, ZMQ_LINGER, &linger, sizeof linger);
}

void frame_out_finish(frame_out_t *out, const ledger_t *ledger)
{
    if (ledger && ledger->heard) {
        frame_t eos;
        frame_init(&eos, FRAME_EOS);
        eos.eos = (frame_eos_t){
            .sender = (char *)ledger_instance_id(out->stage),
            .origin = ledger->origin,
            .announced = ledger->announced,
            .served = out->served,
            .ids = ledger->ids,
            .n_ids = ledger->n_ids,
        };
        buf_clear(&out->buf);
        frame_encode(&eos, &out->buf);
        out->counters.frames++;
        out->counters.bytes += out->buf.len;
        out->counters.by_type[FRAME_EOS]++;
        if (out->sock) offer_eos_on_socket(out);
        else send_encoded(out, 0);
    }
    if (out->sock) {
        peer_monitor_close(&out->mon, out->sock);
        zmq_close(out->sock);
        out->sock = NULL;
    }
    buf_free(&out->buf);
    free(out);
}

void io_shutdown(void)
{
    /* Blocks until frames still queued on closed sockets are delivered (or their linger ends). */
    void *ctx = zmq_context_if_open();
    if (ctx) zmq_ctx_term(ctx);
}

const io_counters_t *frame_out_counters(const frame_out_t *out)
{
    return &out->counters;
}

uint64_t frame_out_served(const frame_out_t *out)
{
    return out->served;
}
