// Hopper warpgroup matrix multiply-accumulate (wgmma, bf16 operands, fp32 accumulators): the
// fences and groups around the asynchronous products, shared-memory matrix descriptors of the
// 128-byte swizzle, and the shapes the kernels use. A warpgroup is four consecutive warps; each
// thread (warp w, lane 4g + q) holds accumulator elements 4i + c at row 16w + g + 8(c >> 1),
// column 8i + 2q + (c & 1).
#pragma once

#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Orders this thread's generic-proxy shared-memory writes (stores, cp.async) before wgmma's reads.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// This warpgroup's registers a thread: fewer (handing them to the block's pool), more (from it).
template <int N> __device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
// Keeps the compiler from moving accumulator accesses across the asynchronous wgmma.
template <int R> __device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups
// 1024 bytes apart.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

// Descriptor of an MN-major operand in the 128-byte swizzle (a transposed B: rows of 64
// consecutive N elements, the K rows 128 bytes apart): 8-row groups along K 1024 bytes apart,
// 64-element groups along N `ngroup` bytes apart.
__device__ __forceinline__ uint64_t sw128_mn_desc(uint32_t addr, uint32_t ngroup) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(ngroup >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

#define TC_D8(i)                                                                                                          \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// An asm statement's accumulator operands %0..%127, 32 a macro.
#define WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R1 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R2 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define WG_R3 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d[64 x N] += A[64 x 16] (registers: a[0] row g k 2q.., a[1] row g + 8, a[2], a[3] the same at
// k 2q + 8..) * B[16 x N] (shared memory, K-major; T = 1: MN-major, a transposed B).
template <int T> __device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_R0 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : TC_D8(0), TC_D8(8), TC_D8(16), TC_D8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(T));
}
template <int T> __device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_R0 ", " WG_R1 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : TC_D8(0), TC_D8(8), TC_D8(16), TC_D8(24), TC_D8(32), TC_D8(40), TC_D8(48), TC_D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(T));
}
template <int T> __device__ __forceinline__ void wgmma_rs(float (&d)[96], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" WG_R0 ", " WG_R1 ", " WG_R2 "}, "
                 "{%96, %97, %98, %99}, %100, p, 1, 1, %102;\n}\n"
                 : TC_D8(0), TC_D8(8), TC_D8(16), TC_D8(24), TC_D8(32), TC_D8(40), TC_D8(48), TC_D8(56), TC_D8(64), TC_D8(72),
                   TC_D8(80), TC_D8(88)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(T));
}
template <int T> __device__ __forceinline__ void wgmma_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_R0 ", " WG_R1 ", " WG_R2 ", " WG_R3 "}, "
                 "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
                 : TC_D8(0), TC_D8(8), TC_D8(16), TC_D8(24), TC_D8(32), TC_D8(40), TC_D8(48), TC_D8(56), TC_D8(64), TC_D8(72),
                   TC_D8(80), TC_D8(88), TC_D8(96), TC_D8(104), TC_D8(112), TC_D8(120)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(T));
}
// d[64 x N] (+)= A[64 x 32] * B[32 x N] in e4m3 (fp32 accumulators; add = 0 overwrites d): A from
// registers (a[0] row g k 4q.., a[1] row g + 8, a[2], a[3] the same at k 16 + 4q..), B K-major in
// shared memory.
__device__ __forceinline__ void wgmma_e4m3(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int add) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" WG_R0 "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : TC_D8(0), TC_D8(8), TC_D8(16), TC_D8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(add));
}
__device__ __forceinline__ void wgmma_e4m3(float (&d)[64], const uint32_t (&a)[4], uint64_t desc, int add) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" WG_R0 ", " WG_R1 "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : TC_D8(0), TC_D8(8), TC_D8(16), TC_D8(24), TC_D8(32), TC_D8(40), TC_D8(48), TC_D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(add));
}
// d[64 x 32] += A[64 x 16] * B[16 x 32], both K-major in shared memory.
__device__ __forceinline__ void wgmma_ss(float (&d)[16], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : TC_D8(0), TC_D8(8)
                 : "l"(da), "l"(db), "r"(1));
}
#endif
