/* State serialization (docs/STATE.md). */
#include "seqstate_io.h"
#include "dequant.h"
#include "hash64.h"
#include "qat.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ENC_F32 = 0, ENC_PACKED = 1 };
typedef enum { SEC_WINDOW, SEC_POOL, SEC_KEYS } section_t;

/* Packed element format of a section: block width, scale format. */
typedef struct {
    qat_kind_t kind;
    int block;
} packing_t;

static packing_t packing_of(section_t s) {
    return s == SEC_WINDOW ? (packing_t){QAT_FP8_UE8M0, 32} : s == SEC_POOL ? (packing_t){QAT_FP4_E4M3, 16}
                                                                              : (packing_t){QAT_FP4_UE8M0, 32};
}

/* Bytes of one packed row of cols values. */
static size_t packed_row_bytes(packing_t p, int64_t cols) {
    size_t codes = p.kind == QAT_FP8_UE8M0 ? (size_t)cols : (size_t)cols / 2;
    return codes + (size_t)(cols / p.block);
}

/* ---- writing ------------------------------------------------------------------------------ */
static void put_u32(buf_t *b, uint32_t v) { buf_append(b, &v, 4); }
static void put_u64(buf_t *b, uint64_t v) { buf_append(b, &v, 8); }

static uint8_t scale_code(packing_t p, float s) {
    if (p.kind == QAT_FP4_E4M3) return f32_to_e4m3(s);
    int e;
    frexpf(s, &e); /* s = 2^(e-1) */
    return (uint8_t)(e - 1 + 127);
}

static float scale_value(packing_t p, uint8_t code) {
    return p.kind == QAT_FP4_E4M3 ? e4m3_to_f32(code) : e8m0_to_f32(code);
}

/* Packs one row; false if the values are not exactly representable (then fp32 is used). */
static bool pack_row(packing_t p, const float *v, int64_t cols, uint8_t *out) {
    uint8_t *codes = out, *scales = out + (p.kind == QAT_FP8_UE8M0 ? cols : cols / 2);
    for (int64_t b = 0; b < cols / p.block; b++) {
        const float *x = v + b * p.block;
        float amax = 0.0f;
        for (int i = 0; i < p.block; i++) amax = fmaxf(amax, fabsf(x[i]));
        float s = qat_scale(p.kind, amax);
        if (!(s > 0.0f) || !isfinite(s)) return false;
        uint8_t sc = scale_code(p, s);
        if (scale_value(p, sc) != s) return false;
        scales[b] = sc;
        for (int i = 0; i < p.block; i++) {
            int64_t k = b * p.block + i;
            float d;
            if (p.kind == QAT_FP8_UE8M0) {
                codes[k] = f32_to_e4m3(x[i] / s);
                d = e4m3_to_f32(codes[k]) * s;
            } else {
                uint8_t c = f32_to_e2m1(x[i] / s);
                codes[k / 2] = (uint8_t)(k & 1 ? (codes[k / 2] & 0x0F) | c << 4 : c);
                d = e2m1_to_f32(c) * s;
            }
            if (memcmp(&d, &x[i], 4)) return false;
        }
    }
    return true;
}

/* A section of rows x cols floats: encoding word, then the data. */
static void put_section(buf_t *b, section_t sec, bool qat, const float *v, int64_t rows, int64_t cols) {
    packing_t p = packing_of(sec);
    size_t rb = packed_row_bytes(p, cols);
    uint8_t *packed = NULL;
    bool ok = qat && rows > 0;
    if (ok) {
        packed = xmalloc(rb * (size_t)rows);
        for (int64_t r = 0; r < rows && ok; r++) ok = pack_row(p, v + r * cols, cols, packed + rb * (size_t)r);
    }
    put_u32(b, ok ? ENC_PACKED : ENC_F32);
    if (ok) buf_append(b, packed, rb * (size_t)rows);
    else buf_append(b, v, (size_t)(rows * cols) * 4);
    free(packed);
}

static float *download_rows(backend_t *bk, bk_tensor_t t, int64_t r0, int64_t n) {
    float *h = xmalloc((size_t)(n * t.cols + 1) * 4);
    if (n) bk->download(bk, h, bk_rows(t, r0, n));
    return h;
}

static float *download_paged(const pagestore_t *s, int64_t n, int64_t cols) {
    float *h = xmalloc((size_t)(n * cols + 1) * 4);
    pagestore_download(s, 0, n, h);
    return h;
}

void seqstate_serialize(const seqstate_t *st, buf_t *out) {
    const model_config_t *c = &st->m->cfg;
    backend_t *bk = st->m->bk;
    size_t start = out->len;
    int n_hist = c->n_engram ? c->engram_max_ngram - 1 : 0;
    buf_append(out, SEQSTATE_MAGIC, 8);
    put_u32(out, SEQSTATE_VERSION);
    put_u32(out, st->qat ? 1 : 0);
    put_u64(out, st->m->fingerprint);
    put_u64(out, (uint64_t)st->T);
    put_u64(out, (uint64_t)st->next_token);
    put_u64(out, st->rng[0]);
    put_u64(out, st->rng[1]);
    put_u32(out, (uint32_t)c->n_layers);
    put_u32(out, (uint32_t)n_hist);
    for (int s = 0; s < n_hist; s++) put_u32(out, (uint32_t)st->hist[s]);
    for (int L = 0; L < c->n_layers; L++) {
        const seq_layer_t *l = &st->layers[L];
        const layer_sched_t *s = &c->layers[L];
        int64_t W = l->ring.rows, first = l->win_end - W > l->win_lo ? l->win_end - W : l->win_lo, rows = l->win_end - first;
        put_u64(out, (uint64_t)l->win_lo);
        put_u64(out, (uint64_t)l->win_end);
        float *win = xmalloc((size_t)(rows * c->head_dim + 1) * 4);
        for (int64_t p = first; p < l->win_end; p++) bk->download(bk, win + (p - first) * c->head_dim, bk_rows(l->ring, p % W, 1));
        put_section(out, SEC_WINDOW, st->qat, win, rows, c->head_dim);
        free(win);
        if (!s->has_compressor) continue;
        put_u64(out, (uint64_t)l->n_entries);
        float *pool = download_paged(&l->pool, l->n_entries, c->head_dim);
        put_section(out, SEC_POOL, st->qat, pool, l->n_entries, c->head_dim);
        free(pool);
        if (s->indexer_keys) {
            float *keys = download_paged(&l->keys, l->n_entries, c->index_head_dim);
            put_section(out, SEC_KEYS, st->qat, keys, l->n_entries, c->index_head_dim);
            free(keys);
        }
        if (s->ratio > 1) {
            put_u32(out, (uint32_t)l->n_pend);
            float *z = download_rows(bk, l->pend_z, 0, l->n_pend), *g = download_rows(bk, l->pend_s, 0, l->n_pend);
            buf_append(out, z, (size_t)(l->n_pend * c->head_dim) * 4);
            buf_append(out, g, (size_t)(l->n_pend * c->head_dim) * 4);
            free(z);
            free(g);
        }
    }
    put_u64(out, hash64(HASH64_INIT, out->data + start, out->len - start));
}

/* ---- reading ------------------------------------------------------------------------------ */
typedef struct {
    const uint8_t *p;
    size_t len, at;
    char *err;
    size_t errlen;
    bool failed;
} reader_t;

static bool fail(reader_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(reader_t *r, const char *fmt, ...) {
    if (!r->failed) {
        int k = snprintf(r->err, r->errlen, "state at byte %zu: ", r->at);
        va_list ap;
        va_start(ap, fmt);
        if (k >= 0 && (size_t)k < r->errlen) vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    r->failed = true;
    return false;
}

/* The next n bytes (not yet taken), or NULL when the reader has failed or fewer are left. */
static const uint8_t *next_bytes(reader_t *r, size_t n, const char *what) {
    if (r->failed) return NULL;
    if (n > r->len - r->at) {
        fail(r, "truncated in %s (%zu bytes needed, %zu left)", what, n, r->len - r->at);
        return NULL;
    }
    return r->p + r->at;
}

static bool take(reader_t *r, void *dst, size_t n, const char *what) {
    const uint8_t *src = next_bytes(r, n, what);
    if (!src) return false;
    memcpy(dst, src, n);
    r->at += n;
    return true;
}

/* Takes the `bytes` input bytes v was read from when its n values are finite; else frees v
 * and fails. */
static float *take_finite(reader_t *r, float *v, int64_t n, size_t bytes, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            free(v);
            fail(r, "%s: value %lld is not finite", what, (long long)i);
            return NULL;
        }
    r->at += bytes;
    return v;
}

static uint32_t get_u32(reader_t *r, const char *what) {
    uint32_t v = 0;
    take(r, &v, 4, what);
    return v;
}

static uint64_t get_u64(reader_t *r, const char *what) {
    uint64_t v = 0;
    take(r, &v, 8, what);
    return v;
}

/* Reads rows x cols raw fp32 values (NULL on failure). */
static float *get_floats(reader_t *r, int64_t rows, int64_t cols, const char *what) {
    size_t need = (size_t)(rows * cols) * 4;
    const uint8_t *src = next_bytes(r, need, what);
    if (!src) return NULL;
    float *v = xmalloc(need + 4);
    memcpy(v, src, need);
    return take_finite(r, v, rows * cols, need, what);
}

/* Reads a section of rows x cols into a new float array (NULL on failure). */
static float *get_section(reader_t *r, section_t sec, bool qat, int64_t rows, int64_t cols, const char *what) {
    uint32_t enc = get_u32(r, what);
    if (r->failed) return NULL;
    if (enc != ENC_F32 && !(enc == ENC_PACKED && qat)) {
        fail(r, "%s: encoding %u is not valid here", what, enc);
        return NULL;
    }
    if (enc == ENC_F32) return get_floats(r, rows, cols, what);
    packing_t p = packing_of(sec);
    size_t need = packed_row_bytes(p, cols) * (size_t)rows;
    const uint8_t *src = next_bytes(r, need, what);
    if (!src) return NULL;
    float *v = xmalloc((size_t)(rows * cols + 1) * 4);
    for (int64_t row = 0; row < rows; row++) {
        const uint8_t *codes = src + packed_row_bytes(p, cols) * (size_t)row;
        const uint8_t *scales = codes + (p.kind == QAT_FP8_UE8M0 ? cols : cols / 2);
        for (int64_t k = 0; k < cols; k++) {
            float s = scale_value(p, scales[k / p.block]);
            uint8_t code = p.kind == QAT_FP8_UE8M0 ? codes[k] : (uint8_t)(codes[k / 2] >> (4 * (k & 1)));
            v[row * cols + k] = (p.kind == QAT_FP8_UE8M0 ? e4m3_to_f32(code) : e2m1_to_f32(code)) * s;
        }
    }
    return take_finite(r, v, rows * cols, need, what);
}

static void upload_rows(backend_t *bk, bk_tensor_t t, int64_t r0, int64_t n, const float *v) {
    if (n) bk->upload(bk, bk_rows(t, r0, n), v);
}

static bool read_layer(reader_t *r, seqstate_t *st, int L) {
    const model_config_t *c = &st->m->cfg;
    const layer_sched_t *s = &c->layers[L];
    backend_t *bk = st->m->bk;
    seq_layer_t *l = &st->layers[L];
    char what[64];
    snprintf(what, sizeof what, "layer %d window", L);
    int64_t lo = (int64_t)get_u64(r, what), end = (int64_t)get_u64(r, what), W = l->ring.rows;
    if (r->failed) return false;
    bool always_runs = L <= c->first_decoder_layer; /* only later decoder layers skip prompt tokens (replay) */
    if (end < 0 || end > st->T || (always_runs && end != st->T) || lo < 0 || lo > end || (always_runs && lo))
        return fail(r, "%s: positions [%lld, %lld) do not fit position %lld", what, (long long)lo, (long long)end,
                    (long long)st->T);
    int64_t first = end - W > lo ? end - W : lo, rows = end - first;
    float *win = get_section(r, SEC_WINDOW, st->qat, rows, c->head_dim, what);
    if (!win) return false;
    for (int64_t p = first; p < end; p++) upload_rows(bk, l->ring, p % W, 1, win + (p - first) * c->head_dim);
    free(win);
    l->win_lo = lo;
    l->win_end = end;
    if (!s->has_compressor) return true;
    snprintf(what, sizeof what, "layer %d pool", L);
    int64_t n = (int64_t)get_u64(r, what);
    if (r->failed) return false;
    if (n != st->T / s->ratio) return fail(r, "%s: %lld entries, position %lld needs %lld", what, (long long)n, (long long)st->T, (long long)(st->T / s->ratio));
    float *pool = get_section(r, SEC_POOL, st->qat, n, c->head_dim, what);
    if (!pool) return false;
    seqstate_reserve(st, L, n);
    pagestore_upload(&l->pool, 0, n, pool);
    free(pool);
    l->n_entries = n;
    if (s->indexer_keys) {
        snprintf(what, sizeof what, "layer %d indexer keys", L);
        float *keys = get_section(r, SEC_KEYS, st->qat, n, c->index_head_dim, what);
        if (!keys) return false;
        pagestore_upload(&l->keys, 0, n, keys);
        free(keys);
    }
    seqstate_sync(st, L);
    if (s->ratio > 1) {
        snprintf(what, sizeof what, "layer %d pending group", L);
        int64_t np = get_u32(r, what);
        if (r->failed) return false;
        if (np != st->T % s->ratio) return fail(r, "%s: %lld tokens, position %lld needs %lld", what, (long long)np, (long long)st->T, (long long)(st->T % s->ratio));
        for (int k = 0; k < 2; k++) {
            float *v = get_floats(r, np, c->head_dim, what);
            if (!v) return false;
            upload_rows(bk, k ? l->pend_s : l->pend_z, 0, np, v);
            free(v);
        }
        l->n_pend = (int)np;
    }
    return true;
}

int64_t seqstate_peek_positions(const void *data, size_t len) {
    const uint8_t *p = data;
    uint32_t version;
    int64_t T;
    if (len < 32 || memcmp(p, SEQSTATE_MAGIC, 8)) return -1;
    memcpy(&version, p + 8, 4);
    memcpy(&T, p + 24, 8);
    return version == SEQSTATE_VERSION && T >= 0 && T <= SEQSTATE_MAX_T ? T : -1;
}

seqstate_t *seqstate_deserialize(const model_t *m, const void *data, size_t len, char *err, size_t errlen) {
    const model_config_t *c = &m->cfg;
    reader_t r = {data, len, 0, err, errlen, false};
    char magic[8];
    if (!take(&r, magic, 8, "the header")) return NULL;
    if (memcmp(magic, SEQSTATE_MAGIC, 8)) {
        fail(&r, "not a DeepInfer state (bad magic)");
        return NULL;
    }
    uint32_t version = get_u32(&r, "the header"), flags = get_u32(&r, "the header");
    uint64_t fp = get_u64(&r, "the header");
    int64_t T = (int64_t)get_u64(&r, "the header"), next = (int64_t)get_u64(&r, "the header");
    uint64_t rng0 = get_u64(&r, "the header"), rng1 = get_u64(&r, "the header");
    uint32_t n_layers = get_u32(&r, "the header"), n_hist = get_u32(&r, "the header");
    int want_hist = c->n_engram ? c->engram_max_ngram - 1 : 0;
    if (r.failed) return NULL;
    if (version != SEQSTATE_VERSION) fail(&r, "version %u, this build reads version %d", version, SEQSTATE_VERSION);
    else if (flags & ~1u) fail(&r, "unknown flags 0x%x", flags);
    else if (fp != m->fingerprint)
        fail(&r, "made by another model (fingerprint %016llx, this model %016llx)", (unsigned long long)fp, (unsigned long long)m->fingerprint);
    else if (T < 0 || T > SEQSTATE_MAX_T) fail(&r, "position %lld out of range", (long long)T);
    else if (next < -1 || next >= c->vocab_size) fail(&r, "next token %lld is not a token id", (long long)next);
    else if (n_layers != (uint32_t)c->n_layers) fail(&r, "%u layers, the model has %d", n_layers, c->n_layers);
    else if (n_hist != (uint32_t)want_hist) fail(&r, "%u Engram history ids, the model keeps %d", n_hist, want_hist);
    if (r.failed) return NULL;
    seqstate_t *st = seqstate_new(m, flags & 1);
    st->T = T;
    st->next_token = next;
    st->rng[0] = rng0;
    st->rng[1] = rng1;
    for (int s = 0; s < want_hist && !r.failed; s++) {
        int32_t h = (int32_t)get_u32(&r, "the Engram history");
        bool dead = T - 1 - s < 0;
        if (!r.failed && (dead ? h != ENGRAM_DEAD : (h < 0 || h >= c->engram_compressed_vocab)))
            fail(&r, "Engram history id %d for position %lld is not valid", h, (long long)(T - 1 - s));
        st->hist[s] = h;
    }
    for (int L = 0; L < c->n_layers && !r.failed; L++) read_layer(&r, st, L);
    size_t body = r.at;
    uint64_t sum = get_u64(&r, "the checksum");
    if (!r.failed && sum != hash64(HASH64_INIT, data, body)) fail(&r, "checksum mismatch (corrupted)");
    if (!r.failed && r.at != len) fail(&r, "%zu bytes after the end of the state", len - r.at);
    if (r.failed) {
        seqstate_free(st);
        return NULL;
    }
    return st;
}
