/* The CUDA backend's functions in a build without nvcc: no device, and a clear reason. */
#include "backend_cuda.h"
#include "util.h"

int backend_cuda_device_count(void) { return 0; }

backend_t *backend_cuda_create(int device, char *err, size_t errlen) {
    (void)device;
    snprintf(err, errlen, "this build has no CUDA backend (nvcc was not found when it was built)");
    return NULL;
}

static _Noreturn void no_cuda(void) { die("this build has no CUDA backend"); }

void backend_cuda_precision(backend_t *bk, cuda_precision_t p) { (void)bk, (void)p, no_cuda(); }
void backend_cuda_hopper_forms(backend_t *bk, int on) { (void)bk, (void)on, no_cuda(); }
void backend_cuda_graphs(backend_t *bk, bool on) { (void)bk, (void)on, no_cuda(); }
void backend_cuda_graph_begin(backend_t *bk) { (void)bk, no_cuda(); }
void backend_cuda_graph_end(backend_t *bk) { (void)bk, no_cuda(); }
cuda_graph_counts_t backend_cuda_graph_counts(backend_t *bk) { (void)bk, no_cuda(); }
double backend_cuda_graph_replay(backend_t *bk, int n) { (void)bk, (void)n, no_cuda(); }
void backend_cuda_ceilings(backend_t *bk, int gemm_size, cuda_ceilings_t *out) { (void)bk, (void)gemm_size, (void)out, no_cuda(); }
void backend_cuda_profile(backend_t *bk, bool on) { (void)bk, (void)on, no_cuda(); }
void backend_cuda_profile_report(backend_t *bk, FILE *f, double divide_by) { (void)bk, (void)f, (void)divide_by, no_cuda(); }
void backend_cuda_sync(backend_t *bk) { (void)bk, no_cuda(); }
void backend_cuda_memory(backend_t *bk, size_t *live, size_t *cached, size_t *weights) {
    (void)bk, (void)live, (void)cached, (void)weights, no_cuda();
}
bk_weight_t *backend_cuda_random_weight(backend_t *bk, wq_kind_t kind, int64_t rows, int64_t cols, float amp, bool host,
                                        uint64_t seed) {
    (void)bk, (void)kind, (void)rows, (void)cols, (void)amp, (void)host, (void)seed, no_cuda();
}
void backend_cuda_fill(backend_t *bk, bk_tensor_t t, float lo, float hi, uint64_t seed) {
    (void)bk, (void)t, (void)lo, (void)hi, (void)seed, no_cuda();
}
