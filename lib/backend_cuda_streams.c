/* The CUDA backend's second and third streams and how the main stream waits for them.
 *
 * side: a decode hc_pre's coefficients (cu_hc_pre), made while the main stream goes on with
 * the site's input, joined by the ops that read them (cu_join_side); the indexer's level-1
 * candidate blocks beside its own selection (cu_indexer_spans, joined there).
 * branch: the forward's branches (backend.h branch_begin/end/join): between begin and end
 * c->stream IS the branch stream, with its own split-K counters, so every op issued there
 * launches on it; the main stream waits for it at the join.
 *
 * Memory: the caching allocator reuses a block in stream order, which is safe on one stream. A
 * block the branch releases, or a tensor released while the other streams may still read it,
 * is held until both are joined, then released. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <stdlib.h>

/* Whether a stream other than the main one may still read or write memory the main one releases. */
static bool others_busy(const cuda_t *c) { return c->side_pending || c->branch_open || c->in_branch; }

bool cu_streams_joined(const cuda_t *c) { return !others_busy(c); }

static void release_held(cuda_t *c) {
    if (others_busy(c)) return;
    for (size_t i = 0; i < c->n_held; i++) cu_release_scratch(c, c->held[i]);
    c->n_held = 0;
}

void cu_release_later(cuda_t *c, void *p) {
    if (!others_busy(c)) {
        cu_release_scratch(c, p);
        return;
    }
    if (c->n_held == c->cap_held) {
        c->cap_held = c->cap_held ? 2 * c->cap_held : 64;
        c->held = xrealloc(c->held, c->cap_held * sizeof *c->held);
    }
    c->held[c->n_held++] = p;
}

void cu_join_side(cuda_t *c) {
    if (!c->side_pending) return;
    if (c->in_branch) die("CUDA backend: an op inside a branch needs the mHC coefficients (only row ops may branch)");
    cu_event_wait(c, c->stream, c->side_done);
    c->side_pending = false;
    if (c->side_partial) cu_release_scratch(c, c->side_partial);
    c->side_partial = NULL;
    release_held(c);
}

void cu_side_fork(cuda_t *c) {
    if (c->in_branch) die("CUDA backend: side-stream work forked inside a branch");
    cu_event_record(c, c->side_fork, c->stream);
    cu_event_wait(c, c->side, c->side_fork);
}

void cu_side_end(cuda_t *c) {
    cu_event_record(c, c->side_done, c->side);
    c->side_pending = true;
}

void cu_join_branch(cuda_t *c) {
    if (c->in_branch) die("CUDA backend: an op that joins the branch was issued inside it");
    if (!c->branch_open) return;
    if (c->branch_on) cu_event_wait(c, c->stream, c->branch_done);
    c->branch_open = false;
    release_held(c);
}

void cu_join_all(cuda_t *c) {
    cu_join_branch(c);
    cu_join_side(c);
}

static void swap_counters(cuda_t *c) {
    unsigned *t = c->counters;
    c->counters = c->branch_counters, c->branch_counters = t;
}

/* The flags are kept with the branch stream off too (DI_CUDA_BRANCH=0: the ops stay on the main
 * stream), so that a misplaced op fails the same way in both modes. */
void cu_branch_begin(backend_t *bk) {
    cuda_t *c = cu_of(bk);
    if (c->in_branch || c->branch_open) die("CUDA backend: branch_begin before the last branch was joined");
    c->in_branch = true;
    if (!c->branch_on) return;
    cu_event_record(c, c->branch_fork, c->stream);
    cu_event_wait(c, c->branch, c->branch_fork);
    c->main_stream = c->stream, c->stream = c->branch;
    swap_counters(c);
}

void cu_branch_end(backend_t *bk) {
    cuda_t *c = cu_of(bk);
    if (!c->in_branch) die("CUDA backend: branch_end without branch_begin");
    c->in_branch = false, c->branch_open = true;
    if (!c->branch_on) return;
    cu_event_record(c, c->branch_done, c->stream);
    c->stream = c->main_stream;
    swap_counters(c);
}

void cu_branch_join(backend_t *bk) { cu_join_branch(cu_of(bk)); }

void cu_streams_create(cuda_t *c, bool side_on, bool branch_on) {
    c->side_on = side_on, c->branch_on = branch_on;
    cudaStream_t *st[] = {&c->stream, &c->side, &c->branch};
    for (size_t i = 0; i < DI_ARRAY_LEN(st); i++) CU(cudaStreamCreateWithFlags(st[i], cudaStreamNonBlocking));
    cudaEvent_t *ev[] = {&c->side_fork, &c->side_done, &c->branch_fork, &c->branch_done};
    for (size_t i = 0; i < DI_ARRAY_LEN(ev); i++) CU(cudaEventCreateWithFlags(ev[i], cudaEventDisableTiming));
    CU(cudaMalloc((void **)&c->side_counter, sizeof *c->side_counter));
    CU(cudaMemset(c->side_counter, 0, sizeof *c->side_counter));
    CU(cudaMalloc((void **)&c->branch_counters, CU_COUNTERS * sizeof *c->branch_counters));
    CU(cudaMemset(c->branch_counters, 0, CU_COUNTERS * sizeof *c->branch_counters));
}

void cu_streams_destroy(cuda_t *c) {
    cu_join_all(c);
    cu_sync(c);
    cudaStream_t st[] = {c->stream, c->side, c->branch};
    for (size_t i = 0; i < DI_ARRAY_LEN(st); i++) CU(cudaStreamDestroy(st[i]));
    cudaEvent_t ev[] = {c->side_fork, c->side_done, c->branch_fork, c->branch_done};
    for (size_t i = 0; i < DI_ARRAY_LEN(ev); i++) CU(cudaEventDestroy(ev[i]));
    CU(cudaFree(c->side_counter));
    CU(cudaFree(c->branch_counters));
    free(c->held);
}
