/* The CUDA backend (Hopper, sm_90): backend.h on one GPU. Kernels in kernels/ (one op per
 * file), host side in lib/backend_cuda*.c. Built when nvcc is present; otherwise
 * lib/backend_nocuda.c provides these functions and backend_cuda_create reports that the build
 * has no CUDA backend.
 *
 * Memory: tensors are fp32/int32 device memory from a caching allocator (the forward's per-call
 * scratch never reaches cudaMalloc after the first step). Weights are copied to the device in
 * their storage format; the Engram tables (FP8 with 1x32 blocks) stay in page-locked host
 * memory that the gather kernel reads directly (24 rows of 264 bytes per token and Engram
 * layer cross the bus; nothing else of the table moves). Work runs on a main stream, with a
 * decode site's mHC coefficients on a second and the forward's branches on a third
 * (backend_cuda_streams.c); download(), pick and sync join them and wait.
 *
 * Precision: fp32 storage and arithmetic, except that matmuls against FP8/FP4/BF16 weights over
 * more than 32 positions (prefill, large batches) run on the wgmma tensor cores and FP8/FP4 ones
 * at fewer positions (decode) on the mma tensor cores in passes of 8 positions, both with bf16
 * operands (the activations split into pieces, see cuda_precision_t) and fp32 accumulation;
 * F32 weights, BF16 ones at few positions and fp32 mode run on the CUDA cores in fp32. */
#ifndef DI_BACKEND_CUDA_H
#define DI_BACKEND_CUDA_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Number of CUDA devices (0 without a driver or a GPU, or in a build without CUDA). */
int backend_cuda_device_count(void);

/* The backend on device `device`; NULL with the reason in err when it cannot start. Free with
 * bk->destroy(bk). */
backend_t *backend_cuda_create(int device, char *err, size_t errlen);

/* How the tensor-core matmuls take their activations:
 *   CUDA_BF16X3  three bf16 pieces (all 24 bits of an fp32, three times the tensor work): the
 *                default, the CPU backend's numbers up to summation order;
 *   CUDA_BF16X2  two pieces (about 16 bits);
 *   CUDA_BF16    rounded to bf16 (the fastest; on the tiny random test models this and BF16X2
 *                flip QAT, routing and top-k decisions, whose effects persist: docs/CUDA_NOTES.md);
 *   CUDA_FP32    no tensor cores: every matmul on the CUDA cores in fp32 (slow prefill);
 *   CUDA_FP8     CUDA_BF16, but the routed experts' FP4 matmuls on many positions (prefill) take
 *                their activations in e4m3 with a power-of-two scale per position and 128
 *                columns, as the model was trained (MODEL.md §2.1: act_quant(x, 128, ue8m0)), on
 *                the FP8 tensor cores (kernels/matmul_tc.cu; where a layer's weights cannot take
 *                that form exactly, k_matmul_tc8_ok, its experts stay in bf16).
 * The environment variable DI_CUDA_PRECISION (bf16x3, bf16x2, bf16, fp32, fp8) sets it at creation. */
typedef enum { CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16, CUDA_FP32, CUDA_FP8 } cuda_precision_t;
void backend_cuda_precision(backend_t *bk, cuda_precision_t p);
/* The prefill kernels' Hopper forms (kernels/kernels.h k_set_hopper_forms; on unless
 * DI_CUDA_HOPPER=0 at creation), for every CUDA backend of the process: the matmuls give the same
 * bits either way, attention in plain bf16 the same up to summation order. */
void backend_cuda_hopper_forms(backend_t *bk, int on);

/* CUDA graphs (lib/backend_cuda_graph.c). By default (on unless DI_CUDA_GRAPHS=0 at creation)
 * the ops are recorded and launched as graph segments, each captured once and then patched
 * where its arguments change; off, every op is launched on its own. */
void backend_cuda_graphs(backend_t *bk, bool on);
/* The ops enqueued between begin and end are one graph, which end launches and waits for.
 * Downloads inside the region land in their host buffers only at end. */
void backend_cuda_graph_begin(backend_t *bk);
void backend_cuda_graph_end(backend_t *bk);
/* So far: graph launches that reused an executable (patched in place), executables captured,
 * and nodes patched. */
typedef struct {
    long reused, captured, patched_nodes;
} cuda_graph_counts_t;
cuda_graph_counts_t backend_cuda_graph_counts(backend_t *bk);
/* Launches the last graph again n times and returns the mean milliseconds per launch: the
 * device time of that step without the host's capture work (benchmark only: it re-runs the
 * step, rewriting the same state rows). */
double backend_cuda_graph_replay(backend_t *bk, int n);

/* The device's own ceilings, measured on random data: device-to-device copy bandwidth (bytes
 * read + written per second) and cuBLASLt dense GEMM rates, bf16 and FP8 e4m3 (per-tensor
 * scales), m = n = k = gemm_size, bf16 output. */
typedef struct {
    char name[256];
    int sms;
    double mem_bytes, copy_bytes_s, bf16_flops, fp8_flops;
    int gemm_size;
} cuda_ceilings_t;
void backend_cuda_ceilings(backend_t *bk, int gemm_size, cuda_ceilings_t *out);

/* Per-op timing with device events: on, every op records its elapsed time under its name;
 * report prints the totals since the last reset (milliseconds, calls) and resets them. */
void backend_cuda_profile(backend_t *bk, bool on);
void backend_cuda_profile_report(backend_t *bk, FILE *f, double divide_by);

/* Waits for all enqueued work. */
void backend_cuda_sync(backend_t *bk);

/* Device memory held: live tensors, cached free blocks, bound weights (bytes). */
void backend_cuda_memory(backend_t *bk, size_t *live, size_t *cached, size_t *weights);

/* Benchmark only (never the default path): a weight of the given storage format synthesized on
 * the device (values uniform in +-amp, FP8 in 32x32 tiles, FP4 and host-resident FP8 in 1x32
 * blocks); host = true puts it in page-locked host memory like an Engram table. */
bk_weight_t *backend_cuda_random_weight(backend_t *bk, wq_kind_t kind, int64_t rows, int64_t cols, float amp, bool host,
                                        uint64_t seed);
/* Fills a tensor with values uniform in [lo, hi) on the device. */
void backend_cuda_fill(backend_t *bk, bk_tensor_t t, float lo, float hi, uint64_t seed);

#endif
