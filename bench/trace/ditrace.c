/* A kernel timeline of any CUDA program, for finding the idle time and the critical path of a
 * decode step (nsys is not usable on the GPU machine). Loaded by the CUDA driver as an
 * injection library:
 *   CUDA_INJECTION64_PATH=build/bench/libditrace.so DI_TRACE_OUT=trace.csv build/bench/cuda_bench ...
 * writes one line per kernel (graph kernels included), in completion-buffer order:
 *   start_ns,end_ns,stream,graph,graph_node,grid_x,grid_y,grid_z,name
 * bench/trace/timeline.py summarizes it. With DI_TRACE_API_OUT=api.csv it also writes one line per
 * CUDA runtime call (the host's side of a launch: start_ns,end_ns,name), which
 * bench/trace/hostapi.py sums per call name. Built with CUPTI's activity API. */
#include <cupti.h>

#include <stdio.h>
#include <stdlib.h>

#define BUF_BYTES ((size_t)8 << 20)

static FILE *out, *api_out;

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME && api_out) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
            const char *name = NULL;
            if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
            fprintf(api_out, "%llu,%llu,\"%s\"\n", (unsigned long long)a->start, (unsigned long long)a->end, name);
        }
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        fprintf(out, "%llu,%llu,%u,%u,%llu,%d,%d,%d,\"%s\"\n", (unsigned long long)k->start, (unsigned long long)k->end,
                k->streamId, k->graphId, (unsigned long long)k->graphNodeId, k->gridX, k->gridY, k->gridZ, k->name);
    }
    free(buf);
}

static void finish(void) {
    cuptiActivityFlushAll(1);
    if (out) fclose(out);
    if (api_out) fclose(api_out);
    out = api_out = NULL;
}

int InitializeInjection(void) {
    const char *path = getenv("DI_TRACE_OUT");
    out = fopen(path ? path : "ditrace.csv", "w");
    if (!out) {
        fprintf(stderr, "ditrace: cannot write %s\n", path ? path : "ditrace.csv");
        return 0;
    }
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "ditrace: CUPTI refused kernel tracing\n");
        return 0;
    }
    const char *api_path = getenv("DI_TRACE_API_OUT");
    if (api_path && (!(api_out = fopen(api_path, "w")) || cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS))
        fprintf(stderr, "ditrace: no runtime-call trace (%s)\n", api_path);
    atexit(finish);
    return 1;
}
