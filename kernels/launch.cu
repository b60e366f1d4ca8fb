// The switch of k_launch's programmatic dependent launch (common.cuh), set once by the backend
// before its first launch.
#include "common.cuh"

int k_pdl = 1;

extern "C" void k_set_pdl(int on) { k_pdl = on != 0; }
