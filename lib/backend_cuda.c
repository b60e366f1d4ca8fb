/* CUDA backend: device selection, the caching allocator, tensors, weight binding (device
 * copies in storage format; Engram tables in page-locked host memory), per-op profiling and the
 * benchmark's weight synthesis. The ops are in backend_cuda_ops.c and backend_cuda_mm.c; how
 * they reach the device (recorded, launched as graphs) in backend_cuda_graph.c. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <cuda_profiler_api.h>

#include <stdlib.h>
#include <string.h>

void cu_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) die("CUDA error in %s (%s:%d): %s", what, file, line, cudaGetErrorString(e));
}

/* ---- caching allocator ------------------------------------------------------------------ */
#define RING_BYTES ((size_t)16 << 20)   /* page-locked, allocated by the first upload */

static size_t round_size(size_t n) { return (n + 511) & ~(size_t)511; }

static void free_cached(cuda_t *c) {
    for (size_t i = 0; i < c->n_bins; i++) {
        for (size_t j = 0; j < c->bins[i].n; j++) CU(cudaFree(c->bins[i].p[j]));
        free(c->bins[i].p);
    }
    c->n_bins = 0;
    c->bytes_cached = 0;
}

/* The first bin of at least size bytes (n_bins if none): free blocks are binned by size so
 * that a step's ~100 allocations cost the host nothing however many blocks finished sequences
 * left in the cache (a scan of them all took ~0.5 ms a step after batch-256 states were freed,
 * run 195 of docs/CUDA_NOTES.md). */
static size_t bin_at(const cuda_t *c, size_t size) {
    size_t lo = 0, hi = c->n_bins;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->bins[mid].size < size) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void *cu_scratch(cuda_t *c, size_t bytes) {
    size_t size = round_size(bytes ? bytes : 1), i = bin_at(c, size);
    cu_block_t *b = xmalloc(sizeof *b);
    if (i < c->n_bins && c->bins[i].size <= 2 * size) { /* the best fit, wasting at most half a block */
        cu_bin_t *bin = &c->bins[i];
        *b = (cu_block_t){bin->p[--bin->n], bin->size};
        if (!bin->n) {
            free(bin->p);
            memmove(bin, bin + 1, (c->n_bins-- - i - 1) * sizeof *bin);
        }
        c->bytes_cached -= b->size;
    } else {
        b->size = size;
        cudaError_t e = cudaMalloc(&b->p, size);
        /* give the cache back and try once more, where what uses it can be waited for */
        if (e != cudaSuccess && !c->one_graph && (!cu_recording(c) || (!c->in_branch && cu_streams_joined(c)))) {
            (void)cudaGetLastError();
            cu_sync(c);
            free_cached(c);
            e = cudaMalloc(&b->p, size);
        }
        if (e != cudaSuccess)
            die("CUDA backend: out of device memory allocating %zu bytes (%zu MiB in tensors, %zu MiB in weights)", size,
                c->bytes_live >> 20, c->bytes_weights >> 20);
    }
    c->bytes_live += b->size;
    u64map_put(&c->live, (uint64_t)(uintptr_t)b->p, b);
    return b->p;
}

void cu_release_scratch(cuda_t *c, void *p) {
    if (c->in_branch) { /* the main stream may reuse it before the branch is done with it */
        cu_release_later(c, p);
        return;
    }
    cu_block_t *b = u64map_remove(&c->live, (uint64_t)(uintptr_t)p);
    if (!b) die("CUDA backend: release of memory it did not allocate");
    size_t i = bin_at(c, b->size);
    if (i == c->n_bins || c->bins[i].size != b->size) { /* a new size: its bin in order */
        if (c->n_bins == c->cap_bins) {
            c->cap_bins = c->cap_bins ? 2 * c->cap_bins : 64;
            c->bins = xrealloc(c->bins, c->cap_bins * sizeof *c->bins);
        }
        memmove(&c->bins[i + 1], &c->bins[i], (c->n_bins++ - i) * sizeof *c->bins);
        c->bins[i] = (cu_bin_t){b->size, NULL, 0, 0};
    }
    cu_bin_t *bin = &c->bins[i];
    if (bin->n == bin->cap) {
        bin->cap = bin->cap ? 2 * bin->cap : 8;
        bin->p = xrealloc(bin->p, bin->cap * sizeof *bin->p);
    }
    bin->p[bin->n++] = b->p;
    c->bytes_live -= b->size;
    c->bytes_cached += b->size;
    free(b);
}

/* ---- profiling -------------------------------------------------------------------------- */
void cu_prof_begin(cuda_t *c, const char *name) {
    if (!c->prof || c->one_graph) return;
    if (c->n_marks == c->cap_marks) {
        size_t cap = c->cap_marks ? 2 * c->cap_marks : 1024;
        c->marks = xrealloc(c->marks, cap * sizeof *c->marks);
        for (size_t i = c->cap_marks; i < cap; i++) {
            CU(cudaEventCreate(&c->marks[i].a));
            CU(cudaEventCreate(&c->marks[i].b));
        }
        c->cap_marks = cap;
    }
    c->marks[c->n_marks].name = name;
    CU(cudaEventRecord(c->marks[c->n_marks].a, c->stream));
}

void cu_prof_end(cuda_t *c) {
    if (!c->prof || c->one_graph) return;
    CU(cudaEventRecord(c->marks[c->n_marks++].b, c->stream));
}

/* Adds the recorded marks to the totals. */
static void prof_collect(cuda_t *c) {
    if (!c->n_marks) return;
    CU(cudaStreamSynchronize(c->stream));
    for (size_t i = 0; i < c->n_marks; i++) {
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, c->marks[i].a, c->marks[i].b));
        int t = 0;
        while (t < c->n_totals && strcmp(c->totals[t].name, c->marks[i].name)) t++;
        if (t == c->n_totals) {
            if (t == (int)DI_ARRAY_LEN(c->totals)) continue;
            c->totals[c->n_totals++] = (cu_total_t){c->marks[i].name, 0, 0};
        }
        c->totals[t].ms += ms;
        c->totals[t].calls++;
    }
    c->n_marks = 0;
}

void backend_cuda_profile(backend_t *bk, bool on) {
    cuda_t *c = cu_of(bk);
    cu_sync(c); /* profiled ops are launched directly, each between its events */
    prof_collect(c);
    c->prof = on;
    /* the profiled steps are also what an external profiler started with its collection off
     * (ncu --profile-from-start off) sees */
    CU(on ? cudaProfilerStart() : cudaProfilerStop());
}

static int by_time(const void *a, const void *b) {
    double x = ((const cu_total_t *)a)->ms, y = ((const cu_total_t *)b)->ms;
    return (x < y) - (x > y);
}

void backend_cuda_profile_report(backend_t *bk, FILE *f, double divide_by) {
    cuda_t *c = cu_of(bk);
    prof_collect(c);
    qsort(c->totals, (size_t)c->n_totals, sizeof *c->totals, by_time);
    double sum = 0;
    for (int t = 0; t < c->n_totals; t++) sum += c->totals[t].ms;
    for (int t = 0; t < c->n_totals; t++)
        fprintf(f, "  %-24s %10.4f ms %6.1f%% %8.1f calls\n", c->totals[t].name, c->totals[t].ms / divide_by,
                100.0 * c->totals[t].ms / (sum > 0 ? sum : 1), c->totals[t].calls / divide_by);
    fprintf(f, "  %-24s %10.4f ms\n", "sum of ops", sum / divide_by);
    c->n_totals = 0;
}

/* ---- tensors ---------------------------------------------------------------------------- */
static bk_tensor_t cuda_alloc(backend_t *bk, bk_dtype_t dtype, int64_t rows, int64_t cols) {
    cuda_t *c = cu_of(bk);
    size_t bytes = (size_t)(rows * cols) * 4;
    void *p = cu_scratch(c, bytes);
    cu_set_async(c, p, bytes ? bytes : 4, c->stream);
    return (bk_tensor_t){p, dtype, rows, cols, cols};
}

static void cuda_release(backend_t *bk, bk_tensor_t *t) {
    cu_release_later(cu_of(bk), t->ptr); /* the other streams may still read it */
    *t = (bk_tensor_t){0};
}

/* bytes of the page-locked ring (what was recorded launched and the device drained before it
 * wraps). */
static void *ring_take(cuda_t *c, size_t bytes) {
    if (!c->ring) {
        void *ring;
        CU(cudaHostAlloc(&ring, RING_BYTES, cudaHostAllocDefault));
        c->ring = ring;
    }
    size_t off = (c->ring_used + 255) & ~(size_t)255;
    if (off + bytes > RING_BYTES) { /* every stream's uploads from the ring done */
        cu_flush(c);
        CU(cudaDeviceSynchronize());
        off = 0;
    }
    c->ring_used = off + bytes;
    return c->ring + off;
}

/* bytes of the spill area: where a recorded upload goes when the ring cannot take it (too
 * large, or full where the recorded ops cannot be launched yet: inside a branch). Outgrown
 * blocks are kept until the next sync (cu_sync frees them). */
static void *spill_take(cuda_t *c, size_t bytes) {
    size_t off = (c->spill_used + 255) & ~(size_t)255;
    if (off + bytes > c->spill_cap) {
        if (c->spill) {
            c->retired = xrealloc(c->retired, (c->n_retired + 1) * sizeof *c->retired);
            c->retired[c->n_retired++] = c->spill;
        }
        c->spill_cap = bytes > 2 * c->spill_cap ? bytes : 2 * c->spill_cap;
        void *p;
        CU(cudaHostAlloc(&p, c->spill_cap, cudaHostAllocDefault));
        c->spill = p, off = 0;
    }
    c->spill_used = off + bytes;
    return c->spill + off;
}

void cu_spill_reset(cuda_t *c) {
    for (size_t i = 0; i < c->n_retired; i++) CU(cudaFreeHost(c->retired[i]));
    c->n_retired = 0, c->spill_used = 0;
}

/* Host data to dst (device memory) from a page-locked copy, so that the upload is
 * asynchronous and may be recorded: a begin/end region's staging, the ring, or when recording
 * and the ring cannot take it the spill area. Otherwise larger uploads copy from the host
 * memory itself. */
static void upload_bytes(cuda_t *c, void *dst, const void *host, size_t bytes) {
    bool ring_ok = bytes <= RING_BYTES / 4 &&
                   (!cu_recording(c) || (!c->in_branch && cu_streams_joined(c)) || c->ring_used + bytes + 255 <= RING_BYTES);
    void *s = c->one_graph ? cu_stage_take(c, bytes) : ring_ok ? ring_take(c, bytes) : cu_recording(c) ? spill_take(c, bytes) : NULL;
    if (!s) {
        CU(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->stream));
        return;
    }
    memcpy(s, host, bytes);
    cu_copy_async(c, dst, s, bytes, cudaMemcpyHostToDevice, c->stream);
}

void *cu_pinned_room(cuda_t *c, size_t bytes) { return bytes <= RING_BYTES / 4 ? ring_take(c, bytes) : NULL; }

void *cu_upload_table(cuda_t *c, const void *host, size_t bytes) {
    void *d = cu_scratch(c, bytes);
    if (bytes) upload_bytes(c, d, host, bytes);
    return d;
}

/* Device -> host in 1-D copies (one per row unless the rows are contiguous): graph nodes can
 * be patched in place as 1-D copies, not 2-D ones. */
static void download_rows(cuda_t *c, void *dst, const void *src, int64_t lds, int64_t rows, int64_t cols) {
    size_t row = (size_t)cols * 4;
    if (rows == 1 || lds == cols) {
        cu_copy_async(c, dst, src, row * (size_t)rows, cudaMemcpyDeviceToHost, c->stream);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        cu_copy_async(c, (char *)dst + (size_t)r * row, (const char *)src + (size_t)(r * lds) * 4, row, cudaMemcpyDeviceToHost, c->stream);
}

static void cuda_upload(backend_t *bk, bk_tensor_t dst, const void *host) {
    cuda_t *c = cu_of(bk);
    size_t row = (size_t)dst.cols * 4;
    cu_join_all(c);
    if (!dst.rows || !row) return;
    if (dst.rows == 1 || dst.ld == dst.cols) {
        upload_bytes(c, dst.ptr, host, row * (size_t)dst.rows);
        return;
    }
    for (int64_t r = 0; r < dst.rows; r++) upload_bytes(c, (float *)dst.ptr + r * dst.ld, (const char *)host + (size_t)r * row, row);
}

static void cuda_download(backend_t *bk, void *host, bk_tensor_t src) {
    cuda_t *c = cu_of(bk);
    size_t row = (size_t)src.cols * 4;
    cu_join_all(c);
    if (!src.rows || !row) return;
    if (c->one_graph) { /* delivered by backend_cuda_graph_end */
        uint8_t *s = cu_stage_take(c, row * (size_t)src.rows);
        download_rows(c, s, src.ptr, src.ld, src.rows, src.cols);
        if (c->n_pending == c->cap_pending) {
            c->cap_pending = c->cap_pending ? 2 * c->cap_pending : 16;
            c->pending = xrealloc(c->pending, c->cap_pending * sizeof *c->pending);
        }
        c->pending[c->n_pending++] = (cu_pending_t){host, (size_t)(s - c->stage), row * (size_t)src.rows};
        return;
    }
    cu_direct_begin(c); /* into host memory that is not page-locked: not a graph's copy */
    download_rows(c, host, src.ptr, src.ld, src.rows, src.cols);
    cu_direct_end(c);
    cu_sync(c);
}

static void cuda_copy(backend_t *bk, bk_tensor_t dst, bk_tensor_t src) {
    cuda_t *c = cu_of(bk);
    cu_prof_begin(c, "copy");
    CU(k_copy(dst.ptr, dst.ld, src.ptr, src.ld, dst.rows, dst.cols, c->stream));
    cu_prof_end(c);
}

void cu_copy_descs(cuda_t *c, const copy_desc_t *d, int n) {
    int64_t most = 0;
    for (int i = 0; i < n; i++) most = d[i].rows * d[i].cols > most ? d[i].rows * d[i].cols : most;
    if (n <= 0 || most <= 0) return;
    copy_desc_t *dev = n > K_COPY_INLINE ? cu_upload_table(c, d, (size_t)n * sizeof *d) : NULL;
    CU(k_copy_many(d, dev, n, most, c->stream));
    if (dev) cu_release_scratch(c, dev);
}

/* One launch for all the copies. */
static void cuda_copy_many(backend_t *bk, const bk_tensor_t *dst, const bk_tensor_t *src, int n) {
    if (n == 1) {
        cuda_copy(bk, dst[0], src[0]);
        return;
    }
    copy_desc_t *d = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (dst[i].rows != src[i].rows || dst[i].cols != src[i].cols)
            die("CUDA backend: copy of %lld x %lld into %lld x %lld", (long long)src[i].rows, (long long)src[i].cols,
                (long long)dst[i].rows, (long long)dst[i].cols);
        if (dst[i].rows * dst[i].cols == 0) continue;
        d[k++] = (copy_desc_t){dst[i].ptr, src[i].ptr, dst[i].ld, src[i].ld, dst[i].rows, dst[i].cols};
    }
    if (k) { /* no launch, no profiling mark, when every copy is empty */
        cu_prof_begin(cu_of(bk), "copy");
        cu_copy_descs(cu_of(bk), d, k);
        cu_prof_end(cu_of(bk));
    }
    free(d);
}

void backend_cuda_sync(backend_t *bk) {
    cu_join_all(cu_of(bk));
    cu_sync(cu_of(bk));
}

void backend_cuda_memory(backend_t *bk, size_t *live, size_t *cached, size_t *weights) {
    cuda_t *c = cu_of(bk);
    *live = c->bytes_live, *cached = c->bytes_cached, *weights = c->bytes_weights;
}

/* ---- weights ---------------------------------------------------------------------------- */
static size_t data_bytes(wq_kind_t kind, int64_t rows, int64_t cols) {
    size_t row = kind == WQ_F32 ? (size_t)cols * 4 : kind == WQ_BF16 ? (size_t)cols * 2 : kind == WQ_FP8 ? (size_t)cols
                                                                                                         : (size_t)(cols + 1) / 2;
    return row * (size_t)rows;
}

static size_t scale_bytes(const wmat_t *m) {
    if (m->kind != WQ_FP8 && m->kind != WQ_FP4) return 0;
    return wmat_scale_count(m->rows, m->cols, m->block_rows, m->block_cols) * (m->scale_f32 ? 4 : 1);
}

/* A page-locked, device-mapped copy of host data; returns the device-visible pointer. (The
 * mapping's own pages are not registered in place: a registered range would cover the
 * neighbouring tensors of the file, whose copies to the device then fail.) */
static const uint8_t *host_resident(bk_weight_t *w, int slot, const uint8_t *src, size_t bytes) {
    void *copy, *dev;
    CU(cudaHostAlloc(&copy, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable));
    memcpy(copy, src, bytes);
    w->reg[slot] = copy;
    CU(cudaHostGetDevicePointer(&dev, copy, 0));
    return dev;
}

/* Whether every one of n fp32 block scales is a normal power of two. */
static bool scales_pow2(const uint8_t *scale, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u, e;
        memcpy(&u, scale + 4 * i, 4);
        e = (u >> 23) & 0xFF;
        if ((u & 0x7FFFFF) || e == 0 || e == 255) return false;
    }
    return true;
}

static bk_weight_t *cuda_bind(backend_t *bk, const wmat_t *m) {
    cuda_t *c = cu_of(bk);
    bk_weight_t *w = xcalloc(1, sizeof *w);
    size_t db = data_bytes(m->kind, m->rows, m->cols), sb = scale_bytes(m);
    w->w = (kw_t){NULL, NULL, (int)m->kind, m->scale_f32, m->block_rows ? m->block_rows : 1,
                  m->block_cols ? m->block_cols : 1, m->rows, m->cols, m->scale_f32 && !scales_pow2(m->scale, sb / 4)};
    w->host = m->kind == WQ_FP8 && m->block_rows == 1; /* the Engram tables (model_weights.h) */
    if (w->host) {
        w->w.data = host_resident(w, 0, m->data, db);
        w->w.scale = host_resident(w, 1, m->scale, sb);
        return w;
    }
    void *d, *s = NULL;
    CU(cudaMalloc(&d, db ? db : 1));
    CU(cudaMemcpy(d, m->data, db, cudaMemcpyHostToDevice));
    if (sb) {
        CU(cudaMalloc(&s, sb));
        CU(cudaMemcpy(s, m->scale, sb, cudaMemcpyHostToDevice));
    }
    w->w.data = d, w->w.scale = s;
    w->bytes = db + sb;
    c->bytes_weights += w->bytes;
    return w;
}

static void cuda_unbind(backend_t *bk, bk_weight_t *w) {
    cuda_t *c = cu_of(bk);
    cu_join_all(c);
    cu_sync(c); /* nothing recorded may still read it */
    if (w->host) {
        for (int i = 0; i < 2; i++)
            if (w->reg[i]) CU(cudaFreeHost(w->reg[i]));
    } else {
        CU(cudaFree((void *)w->w.data));
        if (w->w.scale) CU(cudaFree((void *)w->w.scale));
        c->bytes_weights -= w->bytes;
    }
    free(w);
}

bk_weight_t *backend_cuda_random_weight(backend_t *bk, wq_kind_t kind, int64_t rows, int64_t cols, float amp, bool host,
                                        uint64_t seed) {
    cuda_t *c = cu_of(bk);
    bk_weight_t *w = xcalloc(1, sizeof *w);
    int br = kind == WQ_FP8 && !host ? 32 : 1, bc = 32;
    w->w = (kw_t){NULL, NULL, (int)kind, 0, br, bc, rows, cols, 0};
    size_t db = data_bytes(kind, rows, cols), sb = kind == WQ_FP8 || kind == WQ_FP4 ? wmat_scale_count(rows, cols, br, bc) : 0;
    void *d, *s = NULL;
    w->host = host;
    if (host) { /* page-locked, device-mapped, like a bound Engram table */
        CU(cudaHostAlloc(&d, db, cudaHostAllocMapped | cudaHostAllocPortable));
        if (sb) CU(cudaHostAlloc(&s, sb, cudaHostAllocMapped | cudaHostAllocPortable));
        w->reg[0] = d, w->reg[1] = s;
        void *dd, *ds = NULL;
        CU(cudaHostGetDevicePointer(&dd, d, 0));
        if (s) CU(cudaHostGetDevicePointer(&ds, s, 0));
        d = dd, s = ds;
    } else {
        CU(cudaMalloc(&d, db));
        if (sb) CU(cudaMalloc(&s, sb));
        w->bytes = db + sb;
        c->bytes_weights += w->bytes;
    }
    cu_direct_begin(c); /* k_random_weight fills scales with its own copies */
    CU(k_random_weight(d, s, (int)kind, rows, cols, br, bc, amp, seed, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    cu_direct_end(c);
    w->w.data = d, w->w.scale = s;
    return w;
}

void backend_cuda_fill(backend_t *bk, bk_tensor_t t, float lo, float hi, uint64_t seed) {
    cu_join_all(cu_of(bk));
    CU(k_fill_uniform(t.ptr, t.ld, t.rows, t.cols, lo, hi, seed, cu_of(bk)->stream));
}

/* ---- switches ---------------------------------------------------------------------------- */
void backend_cuda_precision(backend_t *bk, cuda_precision_t p) { cu_of(bk)->precision = p; }

void backend_cuda_hopper_forms(backend_t *bk, int on) { (void)cu_of(bk), k_set_hopper_forms(on); }

/* ---- the backend -------------------------------------------------------------------------- */
static void cuda_destroy(backend_t *bk) {
    cuda_t *c = cu_of(bk);
    cu_streams_destroy(c);
    cu_recorder_destroy(c);
    for (size_t i = 0; i < c->live.cap; i++)
        if (c->live.values[i]) {
            cu_block_t *b = c->live.values[i];
            CU(cudaFree(b->p));
            free(b);
        }
    u64map_free(&c->live);
    free_cached(c);
    free(c->bins);
    for (size_t i = 0; i < c->cap_marks; i++) {
        CU(cudaEventDestroy(c->marks[i].a));
        CU(cudaEventDestroy(c->marks[i].b));
    }
    free(c->marks);
    for (int i = 0; i < c->n_expert_tabs; i++) {
        CU(cudaFree(c->expert_tabs[i].dev));
        free(c->expert_tabs[i].host);
    }
    free(c->expert_tabs);
    free(c->pending);
    if (c->stage) CU(cudaFreeHost(c->stage));
    if (c->ring) CU(cudaFreeHost(c->ring));
    cu_spill_reset(c);
    if (c->spill) CU(cudaFreeHost(c->spill));
    free(c->retired);
    CU(cudaFree(c->counters));
    free(c);
    free(bk);
}

int backend_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

backend_t *backend_cuda_create(int device, char *err, size_t errlen) {
    int n = backend_cuda_device_count();
    if (n == 0) {
        snprintf(err, errlen, "no CUDA device (no GPU, or no driver)");
        return NULL;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "CUDA device %d does not exist (%d present)", device, n);
        return NULL;
    }
    struct cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, device));
    if (p.major < 8) {
        snprintf(err, errlen, "CUDA device %d (%s) has compute capability %d.%d; the kernels need 8.0 or newer (built for 9.0)",
                 device, p.name, p.major, p.minor);
        return NULL;
    }
    /* Switches for measuring what an overlap saves, all on by default: programmatic dependent
     * launch (kernels/common.cuh; DI_CUDA_PDL=0 launches every kernel plainly), the mHC
     * coefficients on a second stream (cu_hc_pre; DI_CUDA_SIDE=0 makes them in the one launch
     * with the site's input), the forward's branches on a third (backend_cuda_streams.c;
     * DI_CUDA_BRANCH=0 runs them in issue order); and the prefill kernels' Hopper forms
     * (kernels.h k_set_hopper_forms; DI_CUDA_HOPPER=0: the forms before them); the ops recorded
     * and launched as graph segments (backend_cuda_graph.c; DI_CUDA_GRAPHS=0 launches each). */
    const char *names[] = {"DI_CUDA_PDL", "DI_CUDA_SIDE", "DI_CUDA_BRANCH", "DI_CUDA_HOPPER", "DI_CUDA_GRAPHS"};
    bool on[5];
    for (int i = 0; i < 5; i++) {
        const char *v = getenv(names[i]);
        if (v && *v && strcmp(v, "0") && strcmp(v, "1")) {
            snprintf(err, errlen, "%s must be 0 or 1, not '%s'", names[i], v);
            return NULL;
        }
        on[i] = !v || strcmp(v, "0");
    }
    k_set_pdl(on[0]);
    k_set_hopper_forms(on[3]);
    CU(cudaSetDevice(device));
    cuda_t *c = xcalloc(1, sizeof *c);
    c->device = device;
    c->sms = p.multiProcessorCount;
    const char *prec = getenv("DI_CUDA_PRECISION");
    c->precision = CUDA_BF16X3;
    if (prec && !strcmp(prec, "bf16x2")) c->precision = CUDA_BF16X2;
    else if (prec && !strcmp(prec, "bf16")) c->precision = CUDA_BF16;
    else if (prec && !strcmp(prec, "fp32")) c->precision = CUDA_FP32;
    else if (prec && !strcmp(prec, "fp8")) c->precision = CUDA_FP8;
    else if (prec && *prec && strcmp(prec, "bf16x3")) {
        snprintf(err, errlen, "DI_CUDA_PRECISION must be bf16x3, bf16x2, bf16 or fp32, not '%s'", prec);
        free(c);
        return NULL;
    }
    cu_streams_create(c, on[1], on[2]);
    cu_recorder_init(c, on[4]);
    CU(cudaMalloc((void **)&c->counters, CU_COUNTERS * sizeof *c->counters));
    CU(cudaMemset(c->counters, 0, CU_COUNTERS * sizeof *c->counters));
    backend_t *bk = xcalloc(1, sizeof *bk);
    *bk = (backend_t){
        .name = "cuda", .impl = c,
        .alloc = cuda_alloc, .release = cuda_release, .upload = cuda_upload, .download = cuda_download,
        .copy = cuda_copy, .copy_many = cuda_copy_many, .bind = cuda_bind, .unbind = cuda_unbind, .destroy = cuda_destroy,
        .matmul = cu_matmul, .matmul_grouped = cu_matmul_grouped, .matmul_expand = cu_matmul_expand, .rmsnorm = cu_rmsnorm, .rope = cu_rope, .rope_spans = cu_rope_spans, .qat = cu_qat,
        .rope_qat_spans = cu_rope_qat_spans,
        .hc_mix = cu_hc_mix, .hc_collapse = cu_hc_collapse, .hc_expand = cu_hc_expand, .hc_fill = cu_hc_fill,
        .hc_pre = cu_hc_pre,
        .gather = cu_gather, .engram_gate = cu_engram_gate,
        .group_pool = cu_group_pool, .attention = cu_attention, .attention_spans = cu_attention_spans,
        .indexer_topk = cu_indexer_topk, .indexer_spans = cu_indexer_spans,
        .router = cu_router, .gate_router = cu_gate_router, .mlp = cu_mlp, .moe = cu_moe, .pick = cu_pick,
        .branch_begin = cu_branch_begin, .branch_end = cu_branch_end, .branch_join = cu_branch_join,
    };
    return bk;
}
