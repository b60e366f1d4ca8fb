// The switches of k_launch's programmatic dependent launch (common.cuh), set once by the backend
// before its first launch, and of the prefill kernels' Hopper forms (kernels.h).
#include "common.cuh"

int k_pdl = 1, k_hopper = 1;

extern "C" void k_set_pdl(int on) { k_pdl = on != 0; }
extern "C" void k_set_hopper_forms(int on) { k_hopper = on != 0; }
