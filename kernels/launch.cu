// The switches of k_launch's programmatic dependent launch (common.cuh), set once by the backend
// before its first launch, and of the prefill kernels' Hopper forms (kernels.h).
#include "common.cuh"

int k_pdl = 1, k_hopper = 1;
cudaError_t (*k_recorder)(const k_launch_t *l);

extern "C" void k_set_pdl(int on) { k_pdl = on != 0; }
extern "C" void k_set_hopper_forms(int on) { k_hopper = on != 0; }

extern "C" cudaError_t k_launch_now(const k_launch_t *l) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = l->grid, cfg.blockDim = l->block, cfg.dynamicSmemBytes = l->smem, cfg.stream = l->stream;
    cfg.attrs = at, cfg.numAttrs = k_pdl ? 1 : 0;
    return cudaLaunchKernelExC(&cfg, l->func, l->args);
}
