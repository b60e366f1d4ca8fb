/* The CUDA backend's recorder: ops are recorded instead of enqueued and launched as CUDA graphs.
 *
 * While recording, every kernel launch (kernels.h k_recorder), copy, memset and cross-stream event
 * of the backend is appended to a list instead of reaching the streams. The list is launched as
 * one graph (a segment) when the main stream issues a kernel with the other streams joined and
 * enough ops are waiting, and before anything the host waits for (a download, a sync). A
 * segment is captured once (the list replayed into a stream capture) and kept: the next list
 * with the same ops in the same place (the same kernels, streams and events, the n-th segment
 * since the last sync) launches that executable after patching the nodes whose arguments
 * changed (positions, ring slots, scratch addresses), which costs the host ~1 us a changed node
 * against ~5 us a launch. So a decode step runs as a few graphs whose host work overlaps the
 * device's: the first segment is short to start the device early, the host records the rest
 * while it runs. (Run 193 of docs/CUDA_NOTES.md: 8 then 96 ops; one segment after the first
 * was slower, 1.94 against 1.83 ms at batch 1, as were 200-op segments.)
 *
 * backend_cuda_graph_begin/end record a whole region as one graph (the benchmark's captured
 * step; its downloads land at end). DI_CUDA_GRAPHS=0 at creation launches every op directly. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define SEG_FIRST 8     /* ops before the first segment of a step may launch */
#define SEG_OPS 96      /* ops before a later one may */
#define SEG_CACHE 256   /* executables kept */
#define ONE_GRAPH (-1)  /* the segment index of a begin/end region */

static cuda_t *owner; /* the backend whose streams the recorder serves (one per process) */

static bool own_stream(const cuda_t *c, cudaStream_t s) { return s && (s == c->stream || s == c->side || s == c->branch || s == c->main_stream); }

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    *cap = n;
    return xrealloc(p, n * elem);
}

static cu_op_t *push_op(cu_list_t *l) {
    l->ops = grow(l->ops, &l->cap_ops, l->n_ops + 1, sizeof *l->ops);
    cu_op_t *op = &l->ops[l->n_ops++];
    memset(op, 0, sizeof *op);
    return op;
}

static void list_clear(cu_list_t *l) { l->n_ops = l->n_args = l->n_bytes = 0; }

static void list_free(cu_list_t *l) {
    free(l->ops), free(l->args), free(l->bytes);
    memset(l, 0, sizeof *l);
}

/* The argument pointers of kernel op op of l (argv holds n_args). */
static void op_argv(const cu_list_t *l, const cu_op_t *op, void **argv) {
    for (uint32_t a = 0; a < op->n_args; a++) argv[a] = l->bytes + l->args[op->arg0 + a].off;
}

static cudaError_t record_kernel(const k_launch_t *k) {
    cuda_t *c = owner;
    if (!c || !cu_recording(c) || !own_stream(c, k->stream)) return k_launch_now(k);
    /* a segment ends before a main-stream kernel once the other streams are joined */
    int most = c->seg_index ? SEG_OPS : SEG_FIRST;
    if (!c->one_graph && k->stream == c->stream && !c->in_branch && cu_streams_joined(c) && c->rec.n_ops >= (size_t)most)
        cu_flush(c);
    cu_list_t *l = &c->rec;
    cu_op_t *op = push_op(l);
    op->kind = CU_OP_KERNEL, op->stream = k->stream, op->func = k->func;
    op->grid = k->grid, op->block = k->block, op->smem = k->smem;
    op->arg0 = (uint32_t)l->n_args, op->n_args = (uint32_t)k->n_args;
    l->args = grow(l->args, &l->cap_args, l->n_args + (size_t)k->n_args, sizeof *l->args);
    for (int a = 0; a < k->n_args; a++) {
        size_t align = k->sizes[a] >= 64 ? 64 : 16, off = (l->n_bytes + align - 1) & ~(align - 1);
        l->bytes = grow(l->bytes, &l->cap_bytes, off + k->sizes[a], 1);
        memcpy(l->bytes + off, k->args[a], k->sizes[a]);
        l->args[l->n_args++] = (cu_arg_t){(uint32_t)off, (uint32_t)k->sizes[a]};
        l->n_bytes = off + k->sizes[a];
    }
    return cudaSuccess;
}

void cu_copy_async(cuda_t *c, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!cu_recording(c)) {
        CU(cudaMemcpyAsync(dst, src, bytes, kind, s));
        return;
    }
    cu_op_t *op = push_op(&c->rec);
    op->kind = CU_OP_COPY, op->stream = s, op->dst = dst, op->src = src, op->bytes = bytes, op->dir = kind;
}

void cu_set_async(cuda_t *c, void *dst, size_t bytes, cudaStream_t s) {
    if (!cu_recording(c)) {
        CU(cudaMemsetAsync(dst, 0, bytes, s));
        return;
    }
    cu_op_t *op = push_op(&c->rec);
    op->kind = CU_OP_SET, op->stream = s, op->dst = dst, op->bytes = bytes;
}

void cu_event_record(cuda_t *c, cudaEvent_t e, cudaStream_t s) {
    if (!cu_recording(c)) {
        CU(cudaEventRecord(e, s));
        return;
    }
    cu_op_t *op = push_op(&c->rec);
    op->kind = CU_OP_RECORD, op->stream = s, op->event = e;
}

void cu_event_wait(cuda_t *c, cudaStream_t s, cudaEvent_t e) {
    if (!cu_recording(c)) {
        CU(cudaStreamWaitEvent(s, e, 0));
        return;
    }
    cu_op_t *op = push_op(&c->rec);
    op->kind = CU_OP_WAIT, op->stream = s, op->event = e;
}

/* What a segment's graph is made of: every op's kind, stream, kernel or event and direction. */
static uint64_t signature(const cu_list_t *l, int index) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)(int64_t)index ^ (uint64_t)l->n_ops << 32;
    for (size_t i = 0; i < l->n_ops; i++) {
        const cu_op_t *op = &l->ops[i];
        uint64_t v[4] = {(uint64_t)op->kind, (uint64_t)(uintptr_t)op->stream, (uint64_t)(uintptr_t)op->func ^ (uint64_t)(uintptr_t)op->event,
                         (uint64_t)op->dir};
        for (int k = 0; k < 4; k++) h = (h ^ v[k]) * 0x100000001B3ull, h ^= h >> 29;
    }
    return h;
}

/* Enqueues op i of l on its stream (inside a capture: adds its node). */
static void issue(const cu_list_t *l, const cu_op_t *op) {
    switch (op->kind) {
    case CU_OP_KERNEL: {
        void *argv[op->n_args + 1];
        op_argv(l, op, argv);
        k_launch_t k = {op->func, op->grid, op->block, op->smem, op->stream, (int)op->n_args, argv, NULL};
        CU(k_launch_now(&k));
        break;
    }
    case CU_OP_COPY: CU(cudaMemcpyAsync(op->dst, op->src, op->bytes, op->dir, op->stream)); break;
    case CU_OP_SET: CU(cudaMemsetAsync(op->dst, 0, op->bytes, op->stream)); break;
    case CU_OP_RECORD: CU(cudaEventRecord(op->event, op->stream)); break;
    case CU_OP_WAIT: CU(cudaStreamWaitEvent(op->stream, op->event, 0)); break;
    }
}

static void seg_free(cu_seg_t *s) {
    if (s->exec) CU(cudaGraphExecDestroy(s->exec));
    if (s->graph) CU(cudaGraphDestroy(s->graph));
    free(s->nodes);
    list_free(&s->params);
    memset(s, 0, sizeof *s);
}

/* Captures l into s (a fresh graph and executable, a node per kernel, copy and memset). */
static void capture(cuda_t *c, cu_seg_t *s, const cu_list_t *l) {
    s->nodes = xcalloc(l->n_ops + 1, sizeof *s->nodes);
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    for (size_t i = 0; i < l->n_ops; i++) {
        const cu_op_t *op = &l->ops[i];
        issue(l, op);
        if (op->kind == CU_OP_RECORD || op->kind == CU_OP_WAIT) continue;
        enum cudaStreamCaptureStatus st;
        const cudaGraphNode_t *deps;
        const cudaGraphEdgeData *edges;
        size_t nd = 0;
        CU(cudaStreamGetCaptureInfo(op->stream, &st, NULL, NULL, &deps, &edges, &nd));
        if (st != cudaStreamCaptureStatusActive || nd != 1) die("CUDA backend: op %zu of a recorded segment left no single node", i);
        s->nodes[i] = deps[0];
    }
    CU(cudaStreamEndCapture(c->stream, &s->graph));
    CU(cudaGraphInstantiate(&s->exec, s->graph, 0));
    c->n_instantiated++;
}

static bool same_bytes(const cu_list_t *a, const cu_op_t *x, const cu_list_t *b, const cu_op_t *y) {
    for (uint32_t k = 0; k < x->n_args; k++) {
        cu_arg_t p = a->args[x->arg0 + k], q = b->args[y->arg0 + k];
        if (p.size != q.size || memcmp(a->bytes + p.off, b->bytes + q.off, p.size)) return false;
    }
    return true;
}

static bool same_dim(dim3 a, dim3 b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

/* Sets the nodes of s whose op in l differs from the one s last ran; false if the executable
 * refused a change (it is then captured anew). */
static bool patch(cuda_t *c, cu_seg_t *s, const cu_list_t *l) {
    for (size_t i = 0; i < l->n_ops; i++) {
        const cu_op_t *op = &l->ops[i], *was = &s->params.ops[i];
        cudaError_t e = cudaSuccess;
        if (op->kind == CU_OP_KERNEL) {
            if (same_dim(op->grid, was->grid) && same_dim(op->block, was->block) && op->smem == was->smem &&
                same_bytes(l, op, &s->params, was))
                continue;
            void *argv[op->n_args + 1];
            op_argv(l, op, argv);
            struct cudaKernelNodeParams p = {(void *)op->func, op->grid, op->block, (unsigned)op->smem, argv, NULL};
            e = cudaGraphExecKernelNodeSetParams(s->exec, s->nodes[i], &p);
        } else if (op->kind == CU_OP_COPY) {
            if (op->dst == was->dst && op->src == was->src && op->bytes == was->bytes) continue;
            e = cudaGraphExecMemcpyNodeSetParams1D(s->exec, s->nodes[i], op->dst, op->src, op->bytes, op->dir);
        } else if (op->kind == CU_OP_SET) {
            if (op->dst == was->dst && op->bytes == was->bytes) continue;
            struct cudaMemsetParams p; /* the element size the capture chose stays */
            e = cudaGraphMemsetNodeGetParams(s->nodes[i], &p);
            p.dst = op->dst, p.width = op->bytes / p.elementSize;
            if (e == cudaSuccess && op->bytes % p.elementSize) e = cudaErrorInvalidValue;
            if (e == cudaSuccess) e = cudaGraphExecMemsetNodeSetParams(s->exec, s->nodes[i], &p);
        } else
            continue;
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        c->n_patched_nodes++;
    }
    return true;
}

/* The cache slot for a new segment: a free one, else the least recently used (its launches
 * drained first: an executable is not destroyed while it may run). */
static cu_seg_t *free_slot(cuda_t *c) {
    if (!c->segs) c->segs = xcalloc(SEG_CACHE, sizeof *c->segs);
    if (c->n_segs < SEG_CACHE) return &c->segs[c->n_segs++];
    cu_seg_t *old = &c->segs[0];
    for (int i = 1; i < c->n_segs; i++)
        if (c->segs[i].used < old->used) old = &c->segs[i];
    CU(cudaStreamSynchronize(c->stream));
    seg_free(old);
    return old;
}

/* Launches the recorded ops as one graph on the main stream (nothing to do when none wait). */
static void launch_list(cuda_t *c, int index) {
    cu_list_t *l = &c->rec;
    if (!l->n_ops) return;
    if (c->in_branch || !cu_streams_joined(c)) die("CUDA backend: a recorded segment ended with a branch or side stream open");
    uint64_t sig = signature(l, index);
    cu_seg_t *s = NULL;
    for (int i = 0; i < c->n_segs && !s; i++)
        if (c->segs[i].sig == sig && c->segs[i].index == index && c->segs[i].params.n_ops == l->n_ops) s = &c->segs[i];
    if (s && patch(c, s, l)) c->n_updated++;
    else {
        if (s) { /* an executable that refused a change: captured anew in its place */
            CU(cudaStreamSynchronize(c->stream));
            seg_free(s);
        } else
            s = free_slot(c);
        s->sig = sig, s->index = index;
        capture(c, s, l);
    }
    CU(cudaGraphLaunch(s->exec, c->stream));
    s->used = ++c->tick;
    c->last = s->exec;
    cu_list_t t = s->params; /* s keeps what it ran; its old list records the next ops */
    s->params = *l, *l = t;
    list_clear(l);
}

void cu_flush(cuda_t *c) {
    if (!c->rec.n_ops || c->one_graph) return;
    launch_list(c, c->seg_index++);
}

void cu_sync(cuda_t *c) {
    cu_join_all(c);
    cu_flush(c);
    CU(cudaStreamSynchronize(c->stream));
    c->seg_index = 0;
    c->ring_used = 0; /* every upload so far has been done */
    cu_spill_reset(c);
}

void cu_direct_begin(cuda_t *c) {
    cu_join_all(c);
    cu_flush(c);
    c->direct++;
}

void cu_direct_end(cuda_t *c) { c->direct--; }

void cu_recorder_init(cuda_t *c, bool graphs) {
    c->graphs = graphs;
    if (owner) return; /* a second backend in the process launches directly */
    owner = c;
    k_recorder = record_kernel;
}

void cu_recorder_destroy(cuda_t *c) {
    for (int i = 0; i < c->n_segs; i++) seg_free(&c->segs[i]);
    free(c->segs);
    list_free(&c->rec);
    if (owner == c) owner = NULL, k_recorder = NULL;
}

void backend_cuda_graphs(backend_t *bk, bool on) {
    cuda_t *c = cu_of(bk);
    cu_join_all(c);
    cu_sync(c);
    c->graphs = on;
}

/* ---- a region as one graph (benchmark, tests) ---------------------------------------------- */
#define STAGE_BYTES ((size_t)256 << 20) /* page-locked, allocated by the first region */

void backend_cuda_graph_begin(backend_t *bk) {
    cuda_t *c = cu_of(bk);
    if (c->one_graph) die("CUDA backend: graph capture already open");
    cu_join_all(c);
    cu_sync(c); /* a region starts with nothing in flight */
    if (!c->stage) {
        void *stage;
        CU(cudaHostAlloc(&stage, STAGE_BYTES, cudaHostAllocDefault));
        c->stage = stage;
        c->stage_cap = STAGE_BYTES;
    }
    c->stage_used = 0;
    c->n_pending = 0;
    c->one_graph = true;
}

void backend_cuda_graph_end(backend_t *bk) {
    cuda_t *c = cu_of(bk);
    if (!c->one_graph) die("CUDA backend: no graph capture open");
    cu_join_all(c); /* the other streams' work rejoins the graph */
    launch_list(c, ONE_GRAPH);
    c->one_graph = false;
    cu_sync(c);
    for (size_t i = 0; i < c->n_pending; i++) memcpy(c->pending[i].host, c->stage + c->pending[i].off, c->pending[i].bytes);
    c->n_pending = 0;
}

void *cu_stage_take(cuda_t *c, size_t bytes) {
    size_t off = (c->stage_used + 255) & ~(size_t)255;
    if (off + bytes > c->stage_cap)
        die("CUDA backend: transfers inside one graph capture exceed the %zu MiB staging area", c->stage_cap >> 20);
    c->stage_used = off + bytes;
    return c->stage + off;
}

cuda_graph_counts_t backend_cuda_graph_counts(backend_t *bk) {
    cuda_t *c = cu_of(bk);
    return (cuda_graph_counts_t){c->n_updated, c->n_instantiated, c->n_patched_nodes};
}

double backend_cuda_graph_replay(backend_t *bk, int n) {
    cuda_t *c = cu_of(bk);
    cu_sync(c);
    if (!c->last || n <= 0) return 0;
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    CU(cudaEventRecord(a, c->stream));
    for (int i = 0; i < n; i++) CU(cudaGraphLaunch(c->last, c->stream));
    CU(cudaEventRecord(b, c->stream));
    CU(cudaEventSynchronize(b));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, a, b));
    CU(cudaEventDestroy(a));
    CU(cudaEventDestroy(b));
    return ms / n;
}
