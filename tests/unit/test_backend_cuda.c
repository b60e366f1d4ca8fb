/* Every CUDA backend op against the CPU backend (the exact fp32 reference, itself checked
 * against double precision by test_backend_ops) in the habit of llama.cpp's test-backend-ops:
 * fresh random inputs every run (the seed is printed; DI_TEST_SEED=N repeats a run), GPU
 * outputs poisoned with NaN before each op, sizes that are not multiples of any tile, and the
 * shapes that take the fast paths (tensor cores, split-K, split attention, host-resident
 * tables). Without a GPU every case reports itself skipped.
 *
 * Tolerances: fp32 ops 1e-5 (max error over max |reference|); matmuls on the tensor cores
 * (FP8/FP4 weights, BF16 ones at more than 32 positions) round their activations to bf16, so
 * matmuls must match the CPU fed the same activations (fp32, or bf16-rounded) within 1e-5, and
 * the CPU's fp32 activations within relative L2 5e-3 (BF16: per precision). QAT and index
 * outputs must match exactly, except top-k entries whose score ties the cut within rounding. The
 * experts are checked against a double reference with the same bf16 rounding points (5e-3: an
 * activation rounded the other way, fp32 against double, moves outputs by a few 1e-4). */
#include "backend_cpu.h"
#include "backend_cuda.h"
#include "dequant.h"
#include "qat.h"
#include "testlib.h"
#include "testnum.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static backend_t *gpu, *cpu;

static float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

/* The GPU's precision as the matmul tests set it (their BF16 cases' tolerances depend on it). */
static cuda_precision_t precision = CUDA_BF16X3;
static void set_precision(cuda_precision_t p) {
    backend_cuda_precision(gpu, p);
    precision = p;
}

/* ---- tensors on both backends --------------------------------------------------------------- */
typedef struct {
    bk_tensor_t g, c;
} pair_t;

static pair_t put2(const void *v, bk_dtype_t dt, int64_t rows, int64_t cols) {
    pair_t p = {gpu->alloc(gpu, dt, rows, cols), cpu->alloc(cpu, dt, rows, cols)};
    gpu->upload(gpu, p.g, v);
    cpu->upload(cpu, p.c, v);
    return p;
}
static pair_t putf(const float *v, int64_t rows, int64_t cols) { return put2(v, BK_F32, rows, cols); }
static pair_t puti(const int32_t *v, int64_t rows, int64_t cols) { return put2(v, BK_I32, rows, cols); }

static void poison_on(backend_t *b, bk_tensor_t t) {
    size_t n = (size_t)(t.rows * t.cols);
    float *nan = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    b->upload(b, t, nan);
    free(nan);
}
static void poison(bk_tensor_t t) { poison_on(gpu, t); }
/* An output pair, the GPU side poisoned. */
static pair_t out2(bk_dtype_t dt, int64_t rows, int64_t cols) {
    pair_t p = {gpu->alloc(gpu, dt, rows, cols), cpu->alloc(cpu, dt, rows, cols)};
    poison(p.g);
    return p;
}
static void free2(pair_t *p) {
    gpu->release(gpu, &p->g);
    cpu->release(cpu, &p->c);
}

/* The same rows in a paged store on each backend (testnum.h: pages out of order, NaN past the rows). */
typedef struct {
    t_paged_t g, c;
} paged_pair_t;
static paged_pair_t put_paged(const float *v, int64_t rows, int64_t cols) {
    return (paged_pair_t){t_paged(gpu, v, rows, cols), t_paged(cpu, v, rows, cols)};
}
static void free_paged(paged_pair_t *p) { t_paged_free(&p->g), t_paged_free(&p->c); }
/* A view of a store's first rows. */
static bk_paged_t first_rows(t_paged_t p, int64_t rows) {
    p.v.rows = rows;
    return p.v;
}

/* Both backends' values of a pair, compared: max error <= tol. */
static double compare(pair_t p, double tol, const char *what) {
    float *g = t_download(gpu, p.g), *c = t_download(cpu, p.c);
    double e = t_max_err(g, c, (size_t)(p.g.rows * p.g.cols));
    CHECKF(e <= tol, "%s: error %.3g > %.1g", what, e, tol);
    free(g), free(c);
    return e;
}

/* ---- weights ---------------------------------------------------------------------------------- */
/* A stored weight with random contents (testnum.h), bound on both backends. */
typedef struct {
    t_weight_t host;
    bk_weight_t *g, *c;
} weight_t;

static weight_t bind_weight(t_weight_t host) {
    weight_t w = {host, gpu->bind(gpu, &host.m), cpu->bind(cpu, &host.m)};
    return w;
}
/* h's block scales stored as fp32 (some Base checkpoints' format) instead of E8M0: the same
 * powers of two, or four in five of them times a factor that is no power of two (weight x scale
 * then not exact in bf16: the CUDA cores in bf16x3). */
static t_weight_t with_f32_scales(t_weight_t h, bool pow2) {
    size_t ns = wmat_scale_count(h.m.rows, h.m.cols, h.m.block_rows, h.m.block_cols);
    float *s = xmalloc(ns * 4);
    for (size_t i = 0; i < ns; i++) s[i] = ldexpf(pow2 ? 1.0f : 1.0f + 0.37f * (float)(i % 5) / 4.0f, (int)h.scale[i] - 127);
    free(h.scale);
    h.scale = (uint8_t *)s;
    h.m.scale = h.scale, h.m.scale_f32 = true;
    wmat_rows(&h.m, 0, h.m.rows, h.dense);
    return h;
}

static enum { E8M0_SCALES, F32_POW2_SCALES, F32_SCALES } scales; /* make_weight's FP8/FP4 block scales */
/* make_weight's FP4 weights with row 0's first two 32-blocks' scales 2^9 apart: not the fp8
 * precision's form (k_matmul_tc8_ok), whose layers then stay in bf16 */
static bool spread_fp4_scales;
static weight_t make_weight(wq_kind_t kind, int64_t rows, int64_t cols, int block_rows) {
    t_weight_t h = t_weight_random(kind, rows, cols, block_rows);
    if (spread_fp4_scales && kind == WQ_FP4 && cols >= 64) {
        h.scale[0] = 116, h.scale[1] = 125;
        wmat_rows(&h.m, 0, h.m.rows, h.dense);
    }
    bool f32 = scales != E8M0_SCALES && (kind == WQ_FP8 || kind == WQ_FP4);
    return bind_weight(f32 ? with_f32_scales(h, scales == F32_POW2_SCALES) : h);
}
static void free_weight(weight_t *w) {
    gpu->unbind(gpu, w->g);
    cpu->unbind(cpu, w->c);
    t_weight_free(&w->host);
}

/* ---- matmul ------------------------------------------------------------------------------------ */
/* x as columns [xo, xo + C) of a C + 4 wide tensor: xo 2 takes the 4-byte activation loads,
 * xo 0 (C a multiple of 4) the 16-byte ones. */
static void matmul_case_at(wq_kind_t kind, int64_t R, int64_t C, int64_t m, int64_t row0, int64_t n, int64_t xo) {
    weight_t w = make_weight(kind, R, C, kind == WQ_FP8 ? 32 : 1);
    bool quant = kind == WQ_FP8 || kind == WQ_FP4;
    /* BF16 weights (rows of whole 16-byte chunks) at more than 32 positions: the tensor cores too */
    bool bf16_tc = kind == WQ_BF16 && m > 32 && C % 8 == 0 && precision != CUDA_FP32;
    float *x = t_rand_vec((size_t)(m * (C + 4)), 1.0f), *xr = xmalloc((size_t)(m * (C + 4)) * 4);
    for (int64_t i = 0; i < m * (C + 4); i++) xr[i] = quant || bf16_tc ? bf16_round(x[i]) : x[i];
    /* x as a column view of a wider tensor, out as one too: the ld paths */
    pair_t tx = putf(x, m, C + 4), txr = putf(xr, m, C + 4), o = out2(BK_F32, m, n + 5), oc = out2(BK_F32, m, n + 5);
    bk_tensor_t xv = bk_cols(tx.g, xo, C), ov = bk_cols(o.g, 1, n);
    gpu->matmul(gpu, ov, xv, w.g, row0);
    cpu->matmul(cpu, bk_cols(o.c, 1, n), bk_cols(txr.c, xo, C), w.c, row0); /* the same (rounded) activations */
    cpu->matmul(cpu, bk_cols(oc.c, 1, n), bk_cols(tx.c, xo, C), w.c, row0); /* fp32 activations */
    float *g = t_download(gpu, o.g), *c = t_download(cpu, o.c), *cf = t_download(cpu, oc.c);
    float *gs = xmalloc((size_t)(m * n) * 4), *cs = xmalloc((size_t)(m * n) * 4), *cfs = xmalloc((size_t)(m * n) * 4);
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) gs[r * n + j] = g[r * (n + 5) + 1 + j], cs[r * n + j] = c[r * (n + 5) + 1 + j], cfs[r * n + j] = cf[r * (n + 5) + 1 + j];
    /* the tensor cores take rounded activations, the CUDA cores fp32 ones: one of the two must match;
     * BF16 in plain bf16 the rounded ones (which the CUDA cores would miss by ~1e-3) */
    double er = t_max_err(gs, cs, (size_t)(m * n)), ef = t_max_err(gs, cfs, (size_t)(m * n));
    double e = bf16_tc && precision == CUDA_BF16 ? er : fmin(er, ef), l2 = t_rel_l2(gs, cfs, (size_t)(m * n));
    CHECKF(e <= 1e-5, "kind %d %lldx%lld m %lld row0 %lld: error %.3g vs the CPU on the same activations", kind, (long long)R,
           (long long)C, (long long)m, (long long)row0, e);
    /* fp32 against fp32 in another summation order: a few 1e-7 typical over k of thousands (1.03e-6 seen); BF16
     * on the tensor cores: that in bf16x3, two pieces' remainder (~2^-17 of each activation) in bf16x2, bf16
     * rounding in bf16 */
    double tol = quant ? 5e-3 : !bf16_tc || precision == CUDA_BF16X3 ? 4e-6 : precision == CUDA_BF16X2 ? 5e-5 : 5e-3;
    CHECKF(l2 <= tol, "kind %d %lldx%lld m %lld: relative L2 %.3g vs fp32 activations", kind, (long long)R, (long long)C,
           (long long)m, l2);
    int untouched = 0; /* the columns around the view keep their poison */
    for (int64_t r = 0; r < m; r++) untouched += isnan(g[r * (n + 5)]) && isnan(g[r * (n + 5) + n + 1]);
    CHECK_EQ(untouched, m);
    free(x), free(xr), free(g), free(c), free(cf), free(gs), free(cs), free(cfs);
    free2(&tx), free2(&txr), free2(&o), free2(&oc);
    free_weight(&w);
}

static void matmul_case(wq_kind_t kind, int64_t R, int64_t C, int64_t m, int64_t row0, int64_t n) {
    matmul_case_at(kind, R, C, m, row0, n, 2);
}

static void test_matmul(void) {
    wq_kind_t kinds[] = {WQ_F32, WQ_BF16, WQ_FP8, WQ_FP4};
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16}; /* tensor-core activations in 3, 2 or 1 pieces */
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++)
    for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) {
        set_precision(precs[pr]);
        matmul_case(kinds[k], 77, 45, 70, 13, 50);     /* odd shape: the plain kernel */
        matmul_case(kinds[k], 300, 200, 1, 7, 250);    /* CUDA cores */
        matmul_case(kinds[k], 300, 200, 5, 0, 300);
        matmul_case(kinds[k], 300, 200, 32, 3, 290);
        matmul_case(kinds[k], 520, 1024, 1, 0, 500);   /* split-K */
        matmul_case(kinds[k], 520, 1024, 3, 32, 488);
        matmul_case(kinds[k], 520, 1024, 40, 0, 520);  /* tensor cores for FP8/FP4/BF16 */
        matmul_case(kinds[k], 520, 1024, 200, 20, 500);
        matmul_case(kinds[k], 130, 96, 33, 0, 130);
        /* tensor cores: two position tiles (256 + 4), 7.5 reduction blocks of 64, 290 outputs, FP8
         * scale rows across a warp's rows; then 300 positions split in 512 + 512 + 32 of the reduction */
        matmul_case(kinds[k], 300, 480, 260, 5, 290);
        matmul_case(kinds[k], 520, 1056, 300, 13, 500);
        if (kinds[k] == WQ_BF16) /* k 200: three reduction blocks of 64 and one of 8; 150 positions, 199 outputs */
            matmul_case(kinds[k], 203, 200, 150, 3, 199);
    }
    set_precision(CUDA_BF16X3);
    for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) { /* 16-byte activation loads, 1 to 8 positions a pass */
        matmul_case_at(kinds[k], 300, 200, 1, 7, 250, 0);
        matmul_case_at(kinds[k], 300, 200, 2, 0, 300, 0);
        matmul_case_at(kinds[k], 300, 200, 3, 0, 300, 0);
        matmul_case_at(kinds[k], 300, 200, 7, 0, 300, 0);
        matmul_case_at(kinds[k], 520, 1024, 1, 0, 500, 0);  /* split-K */
        matmul_case_at(kinds[k], 100, 4000, 8, 0, 100, 0);  /* reduction in several staged chunks */
        matmul_case_at(kinds[k], 70, 6400, 3, 0, 70, 0);
        matmul_case_at(kinds[k], 48, 20000, 1, 0, 48, 0);
        matmul_case_at(kinds[k], 300, 4096, 1, 3, 271, 0); /* 16 splits added by two lanes, a last block of one row */
        matmul_case_at(kinds[k], 300, 4096, 1, 3, 271, 2);
    }
}

/* A narrow F32 weight over more than 32 positions (the mHC mixes of a prefill: matmul_narrow.cu)
 * against the CPU, and bit for bit the CUDA-core matmul's unsplit order emulated here: lane l adds
 * the fused 16-column products of columns l * 16 + 512 j in ascending j, then the warp's
 * butterfly (lane 0's sum). Reductions of 1,040 (a step of 16 columns at the end), 3,072, 512
 * and 1,024; 24, 5 and 17 outputs (warps without one). */
static void narrow_case(int64_t R, int64_t C, int64_t m, int64_t row0, int64_t n) {
    matmul_case_at(WQ_F32, R, C, m, row0, n, 0);
    weight_t w = make_weight(WQ_F32, R, C, 1);
    float *x = t_rand_vec((size_t)(m * C), 1.0f);
    pair_t tx = putf(x, m, C), o = out2(BK_F32, m, n);
    gpu->matmul(gpu, o.g, tx.g, w.g, row0);
    float *g = t_download(gpu, o.g);
    int64_t same = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            const float *wr = w.host.dense + (row0 + j) * C, *xr = x + r * C;
            float v[32];
            for (int l = 0; l < 32; l++) {
                v[l] = 0.0f;
                for (int64_t c = l * 16; c < C; c += 512) {
                    float d = 0.0f;
                    for (int i = 0; i < 16; i++) d = fmaf(wr[c + i], xr[c + i], d);
                    v[l] += d;
                }
            }
            for (int h = 16; h; h >>= 1) {
                float u[32];
                for (int l = 0; l < 32; l++) u[l] = v[l] + v[l ^ h];
                memcpy(v, u, sizeof v);
            }
            same += !memcmp(&v[0], &g[r * n + j], 4);
        }
    CHECKF(same == m * n, "narrow %lldx%lld m %lld: %lld of %lld outputs the unsplit order's bits", (long long)R, (long long)C,
           (long long)m, (long long)same, (long long)(m * n));
    free(x), free(g);
    free2(&tx), free2(&o);
    free_weight(&w);
}

static void test_matmul_narrow(void) {
    narrow_case(27, 1040, 70, 3, 24);
    narrow_case(24, 3072, 100, 0, 24);
    narrow_case(9, 512, 33, 4, 5);
    narrow_case(40, 1024, 49, 20, 17);
}

/* FP8/FP4 weights at 1 to 32 positions on the tensor cores, 8 positions a pass (matmul_tcs), in
 * every tensor-core precision: positions in one pass, several and a part pass; 65 reduction
 * blocks of 32 (split in 5 ranges, 4 of 512 and one of 32) and 3 (1.5 steps, no split);
 * 600 of 700 rows from row 37 (a part row block), x and out as views (16-byte and 4-byte
 * activation loads). */
static void test_matmul_tcs(void) {
    wq_kind_t kinds[] = {WQ_FP8, WQ_FP4};
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16};
    int64_t ms[] = {1, 2, 5, 8, 9, 20, 32};
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        set_precision(precs[pr]);
        for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++)
            for (size_t i = 0; i < DI_ARRAY_LEN(ms); i++) {
                matmul_case_at(kinds[k], 700, 2080, ms[i], 37, 600, i & 1 ? 2 : 0);
                matmul_case_at(kinds[k], 300, 96, ms[i], 0, 300, i & 1 ? 0 : 2);
            }
    }
    set_precision(CUDA_BF16X3);
}

/* FP8 and FP4 weights with fp32 block scales, powers of two (every matmul path: the CUDA cores
 * at one position and split-K, matmul_tcs at a few positions, the wgmma kernels above 32 or the
 * CUDA cores where they take no fp32 scales) or not (the CUDA cores), in bf16x3 and fp32 mode,
 * against the CPU. */
static void test_matmul_f32_scales(void) {
    wq_kind_t kinds[] = {WQ_FP8, WQ_FP4};
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_FP32};
    for (int sc = F32_POW2_SCALES; sc <= F32_SCALES; sc++)
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++)
        for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) {
            scales = sc;
            set_precision(precs[pr]);
            matmul_case_at(kinds[k], 300, 200, 1, 7, 250, 0);
            matmul_case_at(kinds[k], 520, 1024, 1, 0, 500, 0); /* split-K */
            matmul_case_at(kinds[k], 700, 2080, 5, 37, 600, 2);
            matmul_case_at(kinds[k], 520, 1024, 40, 0, 520, 0);
            matmul_case_at(kinds[k], 300, 480, 260, 5, 290, 0);
        }
    scales = E8M0_SCALES;
    set_precision(CUDA_BF16X3);
}

/* Block-diagonal matmul: one launch (16-aligned groups on the CUDA cores, 128 on the tensor
 * cores) or one per group, against the CPU's on the same activations (bf16-rounded for plain
 * bf16) in every precision: at few positions on the tensor cores split (wo_a's shape: 1024 x
 * 512 groups, 4 x 256 x 2048 with 4-byte activation loads) or not. */
static void test_matmul_grouped(void) {
    struct {
        wq_kind_t kind;
        int64_t m, groups, ng, kg, xo;
    } cases[] = {{WQ_FP8, 1, 8, 32, 64, 0},      {WQ_FP8, 3, 4, 48, 96, 2},    {WQ_FP8, 2, 3, 20, 64, 0},
                 {WQ_BF16, 5, 4, 16, 40, 0},     {WQ_FP8, 40, 2, 128, 64, 0},  {WQ_FP4, 40, 3, 100, 64, 0},
                 {WQ_FP8, 1, 8, 1024, 512, 0},   {WQ_FP8, 3, 4, 256, 2048, 2}, {WQ_FP8, 20, 8, 128, 1024, 0},
                 {WQ_FP4, 9, 2, 384, 512, 0}};
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16};
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++)
        for (size_t t = 0; t < DI_ARRAY_LEN(cases); t++) {
            backend_cuda_precision(gpu, precs[pr]);
            int64_t m = cases[t].m, G = cases[t].groups, ng = cases[t].ng, kg = cases[t].kg, xo = cases[t].xo;
            bool quant = cases[t].kind == WQ_FP8 || cases[t].kind == WQ_FP4;
            weight_t w = make_weight(cases[t].kind, G * ng + 3, kg, cases[t].kind == WQ_FP8 ? 32 : 1);
            size_t nx = (size_t)(m * (G * kg + 4));
            float *x = t_rand_vec(nx, 1.0f), *xr = xmalloc(nx * 4);
            for (size_t i = 0; i < nx; i++) xr[i] = quant ? bf16_round(x[i]) : x[i];
            pair_t tx = putf(x, m, G * kg + 4), txr = putf(xr, m, G * kg + 4), o = out2(BK_F32, m, G * ng),
                   orr = out2(BK_F32, m, G * ng);
            gpu->matmul_grouped(gpu, o.g, bk_cols(tx.g, xo, G * kg), w.g, (int)G);
            cpu->matmul_grouped(cpu, o.c, bk_cols(tx.c, xo, G * kg), w.c, (int)G);
            cpu->matmul_grouped(cpu, orr.c, bk_cols(txr.c, xo, G * kg), w.c, (int)G);
            float *g = t_download(gpu, o.g), *c = t_download(cpu, o.c), *cr = t_download(cpu, orr.c);
            size_t n = (size_t)(m * G * ng);
            double e = fmin(t_max_err(g, c, n), t_max_err(g, cr, n));
            CHECKF(e <= 1e-5, "matmul_grouped case %zu precision %d: error %.3g", t, (int)precs[pr], e);
            free2(&tx), free2(&txr), free2(&o), free2(&orr);
            free(x), free(xr), free(g), free(c), free(cr);
            free_weight(&w);
        }
    backend_cuda_precision(gpu, CUDA_BF16X3);
}

static void test_matmul_deterministic(void) {
    weight_t w = make_weight(WQ_FP4, 256, 512, 1);
    float *x = t_rand_vec(150 * 512, 1.0f);
    pair_t tx = putf(x, 150, 512);
    bk_tensor_t o1 = gpu->alloc(gpu, BK_F32, 150, 256), o2 = gpu->alloc(gpu, BK_F32, 150, 256);
    gpu->matmul(gpu, o1, tx.g, w.g, 0);
    gpu->matmul(gpu, o2, tx.g, w.g, 0);
    float *a = t_download(gpu, o1), *b = t_download(gpu, o2);
    CHECK(!memcmp(a, b, 150 * 256 * 4));
    gpu->release(gpu, &o1), gpu->release(gpu, &o2), free2(&tx);
    free(a), free(b), free(x);
    free_weight(&w);
}

/* The CUDA-core matmul's edges: many splits added by several lanes per output (24 x 20480 F32,
 * the mHC mixes' shape), blocks that take several output groups whose last step has one lane,
 * 1 to 6 positions. */
static void test_matmul_walks(void) {
    wq_kind_t kinds[] = {WQ_F32, WQ_BF16, WQ_FP8};
    for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) {
        matmul_case_at(kinds[k], 24, 20480, 1, 0, 24, 0);
        matmul_case_at(kinds[k], 30, 20480, 3, 6, 24, 2);
        matmul_case_at(kinds[k], 9000, 1040, 1, 0, 9000, 0);
        matmul_case_at(kinds[k], 9000, 1040, 6, 7, 8990, 2);
    }
}

/* A row's few-position matmul gives the same bits at 1 to 20 positions (CUDA cores: 1, 2, 4 or
 * 8 a pass; the activations staged in one chunk or in several; split or not, one position in
 * one block a few rows with up to 64 splits over 16 warps; tensor cores,
 * every precision: passes of 1 to 8 positions, 3 and 10 splits, FP8 and FP4): what batched
 * decode needs. */
static void test_matmul_batch_invariance(void) {
    struct {
        wq_kind_t kind;
        int64_t R, C;
        cuda_precision_t prec;
    } cases[] = {{WQ_F32, 24, 20480, CUDA_BF16X3},   {WQ_BF16, 700, 3000, CUDA_BF16X3}, {WQ_FP8, 700, 3000, CUDA_BF16X3},
                 {WQ_FP8, 4240, 7008, CUDA_BF16X3},  {WQ_FP8, 4240, 7008, CUDA_BF16X2}, {WQ_FP8, 4240, 7008, CUDA_BF16},
                 {WQ_FP4, 1300, 5120, CUDA_BF16X3},  {WQ_FP4, 1300, 5120, CUDA_BF16X2}, {WQ_FP8, 1300, 5120, CUDA_BF16},
                 {WQ_FP8, 700, 3000, CUDA_FP32},     {WQ_BF16, 384, 5120, CUDA_BF16X3} /* the router gate: 10 splits */,
                 {WQ_BF16, 271, 4096, CUDA_BF16X3} /* 16 splits */, {WQ_F32, 271, 4096, CUDA_BF16X3},
                 {WQ_FP4, 700, 3000, CUDA_FP32},
                 {WQ_BF16, 32, 5120, CUDA_BF16X3} /* the indexer's head weights: 20 splits, a warp two of them */,
                 {WQ_F32, 24, 12288, CUDA_BF16X3} /* 48 splits: a warp three */};
    enum { M = 20 };
    int64_t ms[] = {8, 3, 2, 1};
    for (size_t t = 0; t < DI_ARRAY_LEN(cases); t++) {
        backend_cuda_precision(gpu, cases[t].prec);
        int64_t R = cases[t].R, C = cases[t].C;
        weight_t w = make_weight(cases[t].kind, R, C, cases[t].kind == WQ_FP8 ? 32 : 1);
        float *x = t_rand_vec((size_t)(M * C), 1.0f);
        bk_tensor_t tx = gpu->alloc(gpu, BK_F32, M, C), all = gpu->alloc(gpu, BK_F32, M, R), o = gpu->alloc(gpu, BK_F32, M, R);
        gpu->upload(gpu, tx, x);
        gpu->matmul(gpu, all, tx, w.g, 0);
        float *ref = t_download(gpu, all);
        int diff = 0;
        for (size_t i = 0; i < DI_ARRAY_LEN(ms); i++) {
            poison(o);
            gpu->matmul(gpu, bk_rows(o, 0, ms[i]), bk_rows(tx, 0, ms[i]), w.g, 0);
            float *v = t_download(gpu, o);
            diff += memcmp(v, ref, (size_t)(ms[i] * R) * 4) != 0;
            free(v);
        }
        CHECKF(diff == 0, "kind %d %lldx%lld precision %d: %d of %zu batch sizes differ from 20 positions", cases[t].kind,
               (long long)R, (long long)C, (int)cases[t].prec, diff, DI_ARRAY_LEN(ms));
        gpu->release(gpu, &tx), gpu->release(gpu, &all), gpu->release(gpu, &o);
        free(x), free(ref);
        free_weight(&w);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
}

static void test_gather(void) {
    struct {
        wq_kind_t kind;
        int block_rows;
    } tables[] = {{WQ_FP8, 32}, {WQ_BF16, 1}, {WQ_FP8, 1} /* Engram layout: host-resident on the GPU */};
    for (size_t t = 0; t < DI_ARRAY_LEN(tables); t++) {
        weight_t w = make_weight(tables[t].kind, 50, 256 + 37 * (tables[t].kind != WQ_FP8 || tables[t].block_rows != 1), tables[t].block_rows);
        int32_t idx[4 * 3] = {0, 49, 7, 3, 3, 3, 12, -1, 50, 22, 41, 1};
        pair_t ti = puti(idx, 4, 3), o = out2(BK_F32, 4, 3 * w.host.m.cols);
        gpu->gather(gpu, o.g, w.g, ti.g);
        cpu->gather(cpu, o.c, w.c, ti.c);
        compare(o, 0, "gather");
        free2(&ti), free2(&o);
        free_weight(&w);
    }
}

/* ---- row-wise ops ------------------------------------------------------------------------------- */
static void test_rmsnorm(void) {
    int64_t shapes[][2] = {{7, 45}, {3, 5120}, {300, 512}};
    for (size_t s = 0; s < DI_ARRAY_LEN(shapes); s++) {
        int64_t m = shapes[s][0], n = shapes[s][1];
        float *x = t_rand_vec((size_t)(m * n), 3.0f), *w = t_rand_vec((size_t)n, 1.0f);
        pair_t tx = putf(x, m, n), tw = putf(w, 1, n), o = out2(BK_F32, m, n);
        for (int with = 0; with < 2; with++) {
            poison(o.g);
            gpu->rmsnorm(gpu, o.g, tx.g, with ? &tw.g : NULL, 1e-20f);
            cpu->rmsnorm(cpu, o.c, tx.c, with ? &tw.c : NULL, 1e-20f);
            compare(o, 1e-5, "rmsnorm");
        }
        gpu->rmsnorm(gpu, tx.g, tx.g, &tw.g, 1e-6f); /* in place */
        cpu->rmsnorm(cpu, tx.c, tx.c, &tw.c, 1e-6f);
        compare(tx, 1e-5, "rmsnorm in place");
        free2(&tx), free2(&tw), free2(&o);
        free(x), free(w);
    }
}

static void test_rope(void) {
    int64_t m = 5, hd = 40, heads = 3, half = 8;
    float *x = t_rand_vec((size_t)(m * heads * hd), 1.0f), f[8];
    for (int p = 0; p < half; p++) f[p] = powf(0.37f, (float)p);
    pair_t tx = putf(x, m, heads * hd), tf = putf(f, 1, half);
    int64_t pos0s[] = {0, 1000, 123457};
    for (size_t i = 0; i < DI_ARRAY_LEN(pos0s); i++)
        for (int inv = 0; inv < 2; inv++) {
            gpu->rope(gpu, tx.g, (int)hd, tf.g, pos0s[i], 3, inv);
            cpu->rope(cpu, tx.c, (int)hd, tf.c, pos0s[i], 3, inv);
            compare(tx, 1e-5, "rope");
        }
    free2(&tx), free2(&tf);
    free(x);
}

static void test_qat(void) {
    struct {
        qat_kind_t kind;
        int block;
    } kinds[] = {{QAT_FP8_UE8M0, 32}, {QAT_FP4_UE8M0, 32}, {QAT_FP4_E4M3, 16}};
    for (size_t k = 0; k < DI_ARRAY_LEN(kinds); k++) {
        int m = 40, n = 512;
        float *x = t_rand_vec((size_t)(m * n), 1.0f);
        for (int i = 0; i < n; i++) x[n + i] *= 1e-6f, x[3 * n + i] *= 3000.0f;
        for (int i = 0; i < 32; i++) x[2 * n + i] = 0.0f;
        for (int i = 0; i < n; i++) x[4 * n + i] = (float)((int)(t_unif() * 24)) * 0.25f; /* many exact ties */
        pair_t t = putf(x, m, n);
        gpu->qat(gpu, t.g, kinds[k].kind, kinds[k].block);
        cpu->qat(cpu, t.c, kinds[k].kind, kinds[k].block);
        float *g = t_download(gpu, t.g), *c = t_download(cpu, t.c);
        CHECKF(!memcmp(g, c, (size_t)(m * n) * 4), "qat kind %d: not bit-identical to the CPU", kinds[k].kind);
        free2(&t);
        free(x), free(g), free(c);
    }
}

static void test_hc(void) {
    struct {
        int hc, D, m, iters;
    } cases[] = {{4, 37, 9, 1}, {4, 3037, 9, 20}, {4, 5120, 1, 20} /* decode: 20480 floats, one load each */,
                 {4, 5120, 40, 20} /* prefill: a warp a row */, {3, 2000, 20, 20},
                 {4, 8200, 9, 3} /* a warp a row over more than 8,192 float4s: two of the wide form's passes */,
                 {3, 37, 2, 20} /* Sinkhorn of any hc, 4-byte loads */, {4, 8200, 2, 3} /* two passes of loads */,
                 {3, 1000, 3, 5}, {2, 64, 2, 5} /* expand: hc 2 and 3 with 16-byte loads */,
                 {6, 200, 2, 5}, {6, 37, 2, 5} /* expand: hc read at run time */};
    for (size_t it = 0; it < DI_ARRAY_LEN(cases); it++) {
        int hc = cases[it].hc, D = cases[it].D, nm = (2 + hc) * hc, m = cases[it].m, iters = cases[it].iters;
        float *X = t_rand_vec((size_t)(m * hc * D), 2.0f), *mixes = t_rand_vec((size_t)(m * nm), 5.0f);
        float *base = t_rand_vec((size_t)nm, 0.5f), *scale = t_rand_vec(3, 1.0f), *y = t_rand_vec((size_t)(m * D), 1.0f);
        pair_t tX = putf(X, m, hc * D), tm = putf(mixes, m, nm), tb = putf(base, 1, nm), ts = putf(scale, 1, 3), ty = putf(y, m, D);
        pair_t coef = out2(BK_F32, m, nm), o = out2(BK_F32, m, D);
        gpu->hc_mix(gpu, coef.g, tm.g, tX.g, tb.g, ts.g, hc, 1e-20f, 1e-6f, iters);
        cpu->hc_mix(cpu, coef.c, tm.c, tX.c, tb.c, ts.c, hc, 1e-20f, 1e-6f, iters);
        compare(coef, 1e-5, "hc_mix");
        if (m > 8) { /* many rows take a warp each (hc_mix.cu): the bits of the first 8 in the one-row-a-block form */
            bk_tensor_t c8 = gpu->alloc(gpu, BK_F32, 8, nm);
            gpu->hc_mix(gpu, c8, bk_rows(tm.g, 0, 8), bk_rows(tX.g, 0, 8), tb.g, ts.g, hc, 1e-20f, 1e-6f, iters);
            float *a8 = t_download(gpu, c8), *all = t_download(gpu, coef.g);
            CHECKF(!memcmp(a8, all, (size_t)(8 * nm) * 4), "hc %d D %d m %d: many rows differ from the one-row form", hc, D, m);
            free(a8), free(all);
            gpu->release(gpu, &c8);
        }
        gpu->hc_mix(gpu, tm.g, tm.g, tX.g, tb.g, ts.g, hc, 1e-20f, 1e-6f, iters); /* in place */
        cpu->hc_mix(cpu, tm.c, tm.c, tX.c, tb.c, ts.c, hc, 1e-20f, 1e-6f, iters);
        compare(tm, 1e-5, "hc_mix in place");
        gpu->hc_collapse(gpu, o.g, tX.g, bk_cols(coef.g, 0, hc), hc);
        cpu->hc_collapse(cpu, o.c, tX.c, bk_cols(coef.c, 0, hc), hc);
        compare(o, 1e-5, "hc_collapse");
        gpu->hc_expand(gpu, tX.g, ty.g, coef.g, hc);
        cpu->hc_expand(cpu, tX.c, ty.c, coef.c, hc);
        compare(tX, 1e-5, "hc_expand");
        pair_t pre = out2(BK_F32, m, hc);
        gpu->hc_fill(gpu, tX.g, pre.g, ty.g, hc);
        cpu->hc_fill(cpu, tX.c, pre.c, ty.c, hc);
        compare(tX, 0, "hc_fill");
        compare(pre, 0, "hc_fill weights");
        free2(&pre);
        pair_t *all[] = {&tX, &tm, &tb, &ts, &ty, &coef, &o};
        for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
        free(X), free(mixes), free(base), free(scale), free(y);
    }
}

/* The mHC pre step (hc_pre) against the CPU's within 1e-5, and bit for bit the GPU's separate
 * ops (matmul, hc_mix, hc_collapse, rmsnorm), which it fuses into one launch at 1 to 8 rows, and
 * every row alone the bits of the row batched (the op run again each time: its counter resets).
 * mixes of a few units after the RMS scale (fn scaled by 4 / sqrt(hc D)); pre a view of a wider
 * tensor; the norm's weight or none. */
static void hc_pre_case(int hc, int64_t D, int64_t m, bool with_norm) {
    int64_t nm = (2 + hc) * hc, K = hc * D;
    t_weight_t host = t_weight_random(WQ_F32, nm + 3, K, 1);
    for (int64_t i = 0; i < (nm + 3) * K; i++) {
        host.dense[i] *= 4.0f / sqrtf((float)K);
        memcpy(host.data + 4 * i, &host.dense[i], 4);
    }
    weight_t fn = bind_weight(host);
    float *X = t_rand_vec((size_t)(m * K), 2.0f), *base = t_rand_vec((size_t)nm, 0.5f), *scale = t_rand_vec(3, 1.0f);
    float *pre = t_rand_vec((size_t)(m * (hc + 5)), 1.0f), *norm = t_rand_vec((size_t)D, 1.0f);
    pair_t tX = putf(X, m, K), tb = putf(base, 1, nm), ts = putf(scale, 1, 3), tp = putf(pre, m, hc + 5), tn = putf(norm, 1, D);
    pair_t coef = out2(BK_F32, m, nm), o = out2(BK_F32, m, D);
    bk_tensor_t pg = bk_cols(tp.g, 2, hc), *ng = with_norm ? &tn.g : NULL;
    gpu->hc_pre(gpu, o.g, coef.g, tX.g, fn.g, tb.g, ts.g, pg, ng, hc, 1e-20f, 1e-6f, 20);
    cpu->hc_pre(cpu, o.c, coef.c, tX.c, fn.c, tb.c, ts.c, bk_cols(tp.c, 2, hc), with_norm ? &tn.c : NULL, hc, 1e-20f, 1e-6f, 20);
    compare(coef, 1e-5, "hc_pre coefficients");
    compare(o, 1e-5, "hc_pre normed input");
    bk_tensor_t c2 = gpu->alloc(gpu, BK_F32, m, nm), o2 = gpu->alloc(gpu, BK_F32, m, D), xc = gpu->alloc(gpu, BK_F32, m, D);
    gpu->matmul(gpu, c2, tX.g, fn.g, 0);
    gpu->hc_mix(gpu, c2, c2, tX.g, tb.g, ts.g, hc, 1e-20f, 1e-6f, 20);
    gpu->hc_collapse(gpu, xc, tX.g, pg, hc);
    gpu->rmsnorm(gpu, o2, xc, ng, 1e-20f);
    float *cg = t_download(gpu, coef.g), *og = t_download(gpu, o.g), *cs = t_download(gpu, c2), *os = t_download(gpu, o2);
    CHECKF(!memcmp(cg, cs, (size_t)(m * nm) * 4) && !memcmp(og, os, (size_t)(m * D) * 4),
           "hc %d D %lld m %lld: not the bits of the separate ops", hc, (long long)D, (long long)m);
    int alone = 0; /* beyond 8 rows the separate ops' matmul stops splitting at 33: rows 1..8 only */
    for (int64_t r = 0; r < m && m <= 8; r++) {
        poison(c2), poison(o2);
        gpu->hc_pre(gpu, bk_rows(o2, r, 1), bk_rows(c2, r, 1), bk_rows(tX.g, r, 1), fn.g, tb.g, ts.g, bk_rows(pg, r, 1), ng, hc,
                    1e-20f, 1e-6f, 20);
        float *c1 = t_download(gpu, bk_rows(c2, r, 1)), *o1 = t_download(gpu, bk_rows(o2, r, 1));
        alone += !memcmp(c1, cg + r * nm, (size_t)nm * 4) && !memcmp(o1, og + r * D, (size_t)D * 4);
        free(c1), free(o1);
    }
    CHECKF(alone == (m <= 8 ? m : 0), "hc %d D %lld m %lld: %d rows alone give the batched bits", hc, (long long)D, (long long)m,
           alone);
    gpu->release(gpu, &c2), gpu->release(gpu, &o2), gpu->release(gpu, &xc);
    pair_t *all[] = {&tX, &tb, &ts, &tp, &tn, &coef, &o};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
    free_weight(&fn);
    free(X), free(base), free(scale), free(pre), free(norm), free(cg), free(og), free(cs), free(os);
}

/* Every precision (the mixes' F32 matmul runs on the CUDA cores in all of them): the model's
 * reduction (4 x 4096, 80 splits), 8 splits with a part one (4 x 1000), 2 (4 x 164), none (4 x
 * 100), hc 3; 70 rows and a reduction not a multiple of 16 (D 37) on the separate kernels. */
static void test_hc_pre(void) {
    struct {
        int hc;
        int64_t D, m;
        bool norm;
    } cases[] = {{4, 4096, 1, true}, {4, 4096, 8, true}, {4, 1000, 1, true}, {4, 1000, 3, false}, {4, 1000, 8, true},
                 {4, 1000, 70, true}, {4, 164, 3, true},  {4, 100, 8, true},  {3, 336, 3, true},   {4, 37, 3, true}};
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16, CUDA_FP32};
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        backend_cuda_precision(gpu, precs[pr]);
        for (size_t i = 0; i < DI_ARRAY_LEN(cases); i++) hc_pre_case(cases[i].hc, cases[i].D, cases[i].m, cases[i].norm);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
}

static void test_engram_gate(void) {
    int hc = 4, D = 300, m = 5;
    float *X = t_rand_vec((size_t)(m * hc * D), 1.0f), *kv = t_rand_vec((size_t)(m * (hc + 1) * D), 1.0f), *qk = t_rand_vec((size_t)(hc * D), 1.5f);
    pair_t tX = putf(X, m, hc * D), tkv = putf(kv, m, (hc + 1) * D), tqk = putf(qk, hc, D);
    gpu->engram_gate(gpu, tX.g, tkv.g, tqk.g, hc, 1e-20f);
    cpu->engram_gate(cpu, tX.c, tkv.c, tqk.c, hc, 1e-20f);
    compare(tX, 1e-5, "engram_gate");
    free2(&tX), free2(&tkv), free2(&tqk);
    free(X), free(kv), free(qk);
}

static void test_group_pool(void) {
    for (int ratio = 1; ratio <= 3; ratio++) {
        int g = 7, d = 200;
        float *z = t_rand_vec((size_t)(g * ratio * d), 1.0f), *s = t_rand_vec((size_t)(g * ratio * d), 4.0f);
        pair_t tz = putf(z, g * ratio, d), ts = putf(s, g * ratio, d), o = out2(BK_F32, g, d);
        gpu->group_pool(gpu, o.g, tz.g, ts.g, ratio);
        cpu->group_pool(cpu, o.c, tz.c, ts.c, ratio);
        compare(o, 1e-5, "group_pool");
        free2(&tz), free2(&ts), free2(&o);
        free(z), free(s);
    }
}

/* ---- attention and indexer ------------------------------------------------------------------------ */
/* The precisions and the attention's tolerance in each (max error over max |reference|). Spans
 * of 32 rows or more take the tensor cores for the attention in bf16x2 (queries, probabilities
 * and inexact keys as two bf16 pieces) and bf16 (rounded), for the indexer in every mode but
 * fp32 (bf16x3: three pieces, the CPU's numbers up to summation order); everything else runs on
 * the CUDA cores in fp32. */
static const struct {
    cuda_precision_t p;
    const char *name;
    double attn_tol;
} precs[] = {{CUDA_BF16X3, "bf16x3", 1e-5}, {CUDA_BF16X2, "bf16x2", 2e-4}, {CUDA_BF16, "bf16", 2e-2}, {CUDA_FP32, "fp32", 1e-5}};

/* Random values, bf16-exact when exact (keys after QAT are: FP8/FP4 codes times their scales). */
static float *rand_keys(size_t n, bool exact) {
    float *v = t_rand_vec(n, 1.0f);
    for (size_t i = 0; exact && i < n; i++) v[i] = bf16_round(v[i]);
    return v;
}

/* Selections of m rows of K entries below npool: a fifth -1, and every row r % 9 == 4 empty. */
static int32_t *rand_sel(int m, int K, int npool) {
    int32_t *sel = xmalloc((size_t)(m * K) * 4 + 4);
    for (int i = 0; i < m * K; i++) sel[i] = t_rnd() % 5 == 0 || (i / K) % 9 == 4 || !npool ? -1 : (int32_t)(t_rnd() % (uint64_t)npool);
    return sel;
}

static void attention_case_at(int H, int d, int W, int m, int npool, int K, int64_t pos0, int64_t win_lo, bool with_pool, bool exact) {
    float *q = t_rand_vec((size_t)(m * H * d), 1.0f), *ring = rand_keys((size_t)(W * d), exact), *kv = rand_keys((size_t)(m * d), exact);
    float *pool = rand_keys((size_t)(npool * d), exact), *sink = t_rand_vec((size_t)H, 2.0f);
    int32_t *sel = rand_sel(m, K, npool);
    pair_t tq = putf(q, m, H * d), tr = putf(ring, W, d), tk = putf(kv, m, d), ts = putf(sink, 1, H);
    pair_t tsel = puti(sel, m, K), o = out2(BK_F32, m, H * d);
    paged_pair_t tp = put_paged(pool, npool, d);
    float scale = 1.0f / sqrtf((float)d);
    cpu->attention(cpu, o.c, tq.c, ts.c, scale, tr.c, tk.c, pos0, W, win_lo, with_pool ? &tp.c.v : NULL, with_pool ? &tsel.c : NULL);
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        backend_cuda_precision(gpu, precs[pr].p);
        poison(o.g);
        gpu->attention(gpu, o.g, tq.g, ts.g, scale, tr.g, tk.g, pos0, W, win_lo, with_pool ? &tp.g.v : NULL, with_pool ? &tsel.g : NULL);
        char what[128];
        snprintf(what, sizeof what, "attention H %d d %d W %d m %d pool %d exact %d %s", H, d, W, m, with_pool, exact, precs[pr].name);
        double e = compare(o, precs[pr].attn_tol, what);
        if (precs[pr].p == CUDA_BF16 && m >= 32) { /* the Hopper form (wgmma) against the one before it: the same roundings */
            float *u = t_download(gpu, o.g);
            backend_cuda_hopper_forms(gpu, 0);
            poison(o.g);
            gpu->attention(gpu, o.g, tq.g, ts.g, scale, tr.g, tk.g, pos0, W, win_lo, with_pool ? &tp.g.v : NULL, with_pool ? &tsel.g : NULL);
            backend_cuda_hopper_forms(gpu, 1);
            float *v = t_download(gpu, o.g);
            double f = t_max_err(u, v, (size_t)(m * H * d));
            /* summation order moves a probability across a bf16 rounding now and then: ~1e-3 at most */
            CHECKF(f <= 2e-3, "%s: Hopper form vs the one before: %.3g", what, f);
            printf("  %s: %.2e vs the CPU, %.2e between the forms\n", what, e, f);
            free(u), free(v);
        }
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
    pair_t *all[] = {&tq, &tr, &tk, &ts, &tsel, &o};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
    free_paged(&tp);
    free(q), free(ring), free(kv), free(pool), free(sink), free(sel);
}

static void attention_case(int H, int d, int W, int m, int npool, int K, int64_t pos0, int64_t win_lo, bool with_pool) {
    attention_case_at(H, d, W, m, npool, K, pos0, win_lo, with_pool, false);
}

static void test_attention(void) {
    attention_case(3, 40, 5, 4, 9, 4, 12, 0, true);
    attention_case(3, 40, 5, 4, 9, 4, 12, 11, true); /* replay start inside the window */
    attention_case(3, 40, 5, 4, 9, 4, 12, 0, false);
    attention_case(3, 40, 5, 4, 9, 4, 2, 0, true);   /* window shorter than W */
    attention_case(20, 64, 16, 1, 50, 24, 100, 0, true);
    attention_case(64, 512, 128, 1, 700, 512, 5000, 0, true); /* V4.1 shapes, one query: split keys */
    attention_case(64, 512, 128, 3, 700, 512, 90, 0, true);
    attention_case(5, 42, 16, 1, 300, 128, 2000, 0, true);    /* split keys, merged 4 bytes at a time */
    attention_case(12, 128, 128, 2, 1500, 1024, 5000, 0, true); /* 1152 keys: 36 ranges, more than the merge loads early */
    attention_case(8, 64, 128, 1, 10, 1, 500, 0, true);         /* 129 keys: 5 ranges, the last of one key */
    attention_case(17, 96, 24, 300, 40, 6, 1000, 0, true);    /* many queries: tensor cores, 30 keys (one part tile) */
    /* tensor cores (32 rows or more) */
    attention_case_at(64, 512, 128, 40, 700, 512, 90, 0, true, false);  /* V4.1 shapes, windows partly before the start */
    attention_case_at(64, 512, 128, 33, 700, 512, 3000, 0, true, true); /* exact keys (QAT): one key piece */
    attention_case_at(64, 512, 128, 36, 5, 3, 0, 0, false, true);       /* no ring, no pool (SWA layer from position 0) */
    attention_case_at(4, 64, 16, 50, 30, 8, 40, 45, true, false);       /* 4 heads; rows before win_lo see only the pool */
    attention_case_at(20, 128, 24, 37, 100, 45, 7, 0, true, false);     /* 20 heads, 24 + 45 keys: three part tiles */
    attention_case_at(16, 256, 32, 45, 200, 64, 300, 0, true, false);   /* head_dim 256 */
    attention_case_at(33, 96, 128, 64, 300, 96, 500, 0, true, true);
}

typedef struct {
    double s;
    int i;
} cand_t;

/* Double-precision indexer scores of row r (the reference for judging ties). */
static void ref_scores(const float *q, const float *w, const float *keys, int Hi, int di, int nvis, float qs, float ws,
                       double *out) {
    for (int j = 0; j < nvis; j++) {
        double s = 0;
        for (int h = 0; h < Hi; h++) {
            double dot = 0;
            for (int c = 0; c < di; c++) dot += (double)q[h * di + c] * keys[j * di + c];
            s += fmax(dot, 0) * qs * w[h] * ws;
        }
        out[j] = s;
    }
}

/* Two selections of one row agree up to entries whose (reference) score ties the cut. */
static bool same_selection(const int32_t *a, const int32_t *b, int K, const double *sc, double cut, double tol) {
    int na = 0, nb = 0;
    for (int k = 0; k < K; k++) na += a[k] >= 0, nb += b[k] >= 0;
    if (na != nb) return false;
    for (int k = 1; k < na; k++)
        if (a[k] <= a[k - 1]) return false;
    for (int k = 0; k < na; k++) {
        bool in = false;
        for (int j = 0; j < nb; j++) in |= a[k] == b[j];
        if (!in && (!sc || fabs(sc[a[k]] - cut) > tol)) return false;
        in = false;
        for (int j = 0; j < na; j++) in |= b[k] == a[j];
        if (!in && (!sc || fabs(sc[b[k]] - cut) > tol)) return false;
    }
    return true;
}

static int by_score_desc(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

/* The k-th largest of v[0..n) (-inf when n < k), and a tolerance for ties at it. */
static double cut_of(const double *v, int n, int k, double *tol) {
    double *s = xmalloc((size_t)n * 8 + 8), top = 0;
    memcpy(s, v, (size_t)n * 8);
    qsort(s, (size_t)n, 8, by_score_desc);
    for (int i = 0; i < n; i++)
        if (isfinite(s[i])) top = fmax(top, fabs(s[i]));
    double cut = n >= k ? s[k - 1] : -INFINITY;
    *tol = 1e-5 * (top + 1e-30);
    free(s);
    return cut;
}

/* Row selections (K entries) and candidate blocks (KB of bs entries; gb NULL: none) of the GPU
 * against the CPU's, given the row's nvis double scores: equal up to entries within tie * top of
 * the cut. */
static bool row_agrees(const int32_t *g, const int32_t *c, int K, const int32_t *gb, const int32_t *cb, int KB, int bs,
                       const double *sc, int nvis, double tie) {
    double tol, btol;
    double cut = cut_of(sc, nvis, K, &tol);
    if (!same_selection(g, c, K, sc, cut, tol * tie / 1e-5)) return false;
    if (!gb) return true;
    int nb = (nvis + bs - 1) / bs;
    double *bsc = xmalloc((size_t)(nb + 1) * sizeof *bsc);
    for (int b = 0; b < nb; b++) {
        bsc[b] = -INFINITY;
        for (int j = b * bs; j < nvis && j < (b + 1) * bs; j++) bsc[b] = fmax(bsc[b], sc[j]);
    }
    if (nb) bsc[nb - 1] = INFINITY;
    double bcut = cut_of(bsc, nb, KB, &btol);
    bool same = same_selection(gb, cb, KB, bsc, bcut, btol * tie / 1e-5);
    free(bsc);
    return same;
}

/* GPU selections (sel, candidate blocks, restricted by the CPU's blocks) against the CPU's,
 * every row, equal up to entries whose double-precision score is within tie * top of the cut. */
static void indexer_case_at(int Hi, int di, int nk, int K, int KB, int bs, int m, int64_t pos0, int ratio, bool exact) {
    float *q = rand_keys((size_t)(m * Hi * di), exact), *w = t_rand_vec((size_t)(m * Hi), 1.0f), *keys = rand_keys((size_t)(nk * di), exact);
    for (int c = 0; c < di; c++) keys[9 * di + c] = keys[4 * di + c]; /* identical keys: an exact tie */
    float qs = 1.0f / sqrtf((float)di), ws = 1.0f / sqrtf((float)Hi);
    pair_t tq = putf(q, m, Hi * di), tw = putf(w, m, Hi);
    paged_pair_t tk = put_paged(keys, nk, di);
    pair_t sel = out2(BK_I32, m, K), blocks = out2(BK_I32, m, KB), sel2 = out2(BK_I32, m, K);
    cpu->indexer_topk(cpu, sel.c, &blocks.c, tq.c, tw.c, tk.c.v, pos0, ratio, NULL, bs, qs, ws);
    int32_t *g = xmalloc((size_t)(m * K) * 4), *c = xmalloc((size_t)(m * K) * 4), *gb = xmalloc((size_t)(m * KB) * 4);
    int32_t *cb = xmalloc((size_t)(m * KB) * 4), *g2 = xmalloc((size_t)(m * K) * 4), *c2 = xmalloc((size_t)(m * K) * 4);
    cpu->download(cpu, c, sel.c), cpu->download(cpu, cb, blocks.c);
    /* the restricted user, both backends given the CPU's candidate blocks */
    pair_t cand = puti(cb, m, KB);
    cpu->indexer_topk(cpu, sel2.c, NULL, tq.c, tw.c, tk.c.v, pos0, ratio, &cand.c, bs, qs, ws);
    cpu->download(cpu, c2, sel2.c);
    double *sc = xmalloc((size_t)nk * 8 + 8);
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        /* rounded operands move the scores of inexact inputs by about 1e-3 (bf16) or 1e-5 (bf16x2) */
        double tie = exact || precs[pr].p == CUDA_BF16X3 || precs[pr].p == CUDA_FP32 ? 1e-5 : precs[pr].p == CUDA_BF16X2 ? 1e-4 : 3e-2;
        backend_cuda_precision(gpu, precs[pr].p);
        poison(sel.g), poison(blocks.g), poison(sel2.g);
        gpu->indexer_topk(gpu, sel.g, &blocks.g, tq.g, tw.g, tk.g.v, pos0, ratio, NULL, bs, qs, ws);
        gpu->indexer_topk(gpu, sel2.g, NULL, tq.g, tw.g, tk.g.v, pos0, ratio, &cand.g, bs, qs, ws);
        gpu->download(gpu, g, sel.g), gpu->download(gpu, gb, blocks.g), gpu->download(gpu, g2, sel2.g);
        int bad = 0, bad2 = 0;
        for (int r = 0; r < m; r++) {
            int nvis = (int)((pos0 + r + 1) / ratio);
            if (nvis > nk) nvis = nk;
            ref_scores(q + r * Hi * di, w + r * Hi, keys, Hi, di, nvis, qs, ws, sc);
            bad += !row_agrees(g + r * K, c + r * K, K, gb + r * KB, cb + r * KB, KB, bs, sc, nvis, tie);
            for (int j = 0; j < nvis; j++) { /* the CPU's candidate blocks restrict the reference */
                bool kept = false;
                for (int b = 0; b < KB; b++) kept |= cb[r * KB + b] == j / bs;
                if (!kept) sc[j] = -INFINITY;
            }
            bad2 += !row_agrees(g2 + r * K, c2 + r * K, K, NULL, NULL, 0, bs, sc, nvis, tie);
        }
        CHECKF(bad == 0, "indexer Hi %d di %d nk %d K %d m %d ratio %d exact %d %s: %d rows select (or pick blocks) differently "
               "beyond ties", Hi, di, nk, K, m, ratio, exact, precs[pr].name, bad);
        CHECKF(bad2 == 0, "restricted selections differ beyond ties in %d rows (%s)", bad2, precs[pr].name);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
    pair_t *all[] = {&tq, &tw, &sel, &blocks, &sel2, &cand};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
    free_paged(&tk);
    free(q), free(w), free(keys), free(g), free(c), free(gb), free(cb), free(g2), free(c2), free(sc);
}

static void indexer_case(int Hi, int di, int nk, int K, int KB, int bs, int m, int64_t pos0, int ratio) {
    indexer_case_at(Hi, di, nk, K, KB, bs, m, pos0, ratio, false);
}

static void test_indexer(void) {
    indexer_case(3, 32, 37, 5, 3, 4, 6, 0, 1);
    indexer_case(3, 32, 37, 5, 3, 4, 6, 20, 2);
    indexer_case(3, 32, 37, 5, 3, 4, 6, 30, 1);
    indexer_case(32, 128, 3000, 512, 64, 8, 3, 2990, 1);  /* V4.1 head shapes, ids above 1024 */
    indexer_case(32, 128, 3000, 512, 64, 8, 1, 2990, 1);  /* one query row (decode), a part tile */
    indexer_case(32, 128, 600, 512, 64, 8, 1, 590, 1);
    indexer_case(40, 30, 700, 40, 20, 8, 3, 690, 1);      /* 40 heads (padded to 48: two key groups of 3 warps), one-float reads */
    indexer_case(128, 64, 2000, 64, 16, 8, 2, 1990, 1);   /* the most heads: 256 threads */
    indexer_case(16, 64, 1500, 40, 20, 8, 20, 2900, 2);
    indexer_case(3, 32, 4000, 512, 64, 64, 1, 3990, 1);   /* one block a row: 8 keys a thread in registers */
    indexer_case(3, 32, 6000, 512, 64, 64, 1, 5990, 1);   /* a cluster a row: 2 keys a thread */
    indexer_case(3, 32, 20000, 512, 64, 64, 1, 19990, 1); /* 8 keys a thread; scores: two tiles a block */
    indexer_case(3, 32, 40000, 512, 64, 64, 1, 39990, 1); /* 16 keys a thread */
    indexer_case(3, 32, 40000, 512, 64, 8, 2, 39990, 1);  /* 5,000 candidate blocks: level 1 in a cluster too */
    indexer_case(3, 32, 100000, 512, 64, 64, 1, 99990, 1); /* a cluster's slices in shared memory */
    indexer_case(3, 32, 300000, 512, 64, 64, 1, 299990, 1); /* a cluster's slices longer than shared memory keeps */
    indexer_case(3, 32, 5000, 50, 10, 8, 6, 0, 1);        /* rows of 1-6 entries in a cluster: empty slices */
    indexer_case(16, 64, 100, 400, 20, 8, 4, 50, 1);      /* fewer visible than K */
    /* tensor cores (32 rows or more): rows past the last tile, part tiles, several rows a block */
    indexer_case_at(32, 128, 3000, 512, 64, 8, 40, 2950, 1, false); /* V4.1 shapes */
    indexer_case_at(32, 128, 1100, 512, 64, 8, 45, 2000, 2, true);  /* exact (QAT) queries and keys: every mode exact */
    indexer_case_at(20, 64, 300, 40, 20, 6, 70, 0, 1, false);       /* 20 heads (padded to 32), visibility from 1 */
    indexer_case_at(3, 32, 90, 5, 3, 4, 33, 100, 2, true);          /* 3 heads: 8 rows a block; 9 rows see nothing */
    indexer_case_at(32, 128, 3000, 512, 64, 8, 1, 2990, 1, true);   /* a decode row, exact: the row kernel's one product a step */
    indexer_case_at(3, 32, 700, 40, 20, 8, 5, 690, 2, true);        /* five rows of 3 heads, exact */
}

/* Prefill spans (tensor cores) and decode spans (attention on the CUDA cores, the indexer's row
 * kernel) in one call, every precision: each
 * row against the CPU, the same bits as its span alone where the path promises it (a row's
 * numbers do not depend on its batch), rows outside the spans untouched. */
static void test_tc_spans(void) {
    enum { M = 120, H = 16, D = 128, W = 24, K = 40, HI = 16, DI = 64, KI = 24, KB = 6, BSZ = 4, NS = 5 };
    bk_span_t sp[NS] = {{.r0 = 0, .n = 40, .pos0 = 10},                  /* window partly before the start */
                        {.r0 = 40, .n = 3, .pos0 = 500},                 /* decode-sized */
                        {.r0 = 43, .n = 0, .pos0 = 9},
                        {.r0 = 45, .n = 70, .pos0 = 1000, .win_lo = 1030}, /* early rows: no window, no pool */
                        {.r0 = 115, .n = 1, .pos0 = 77}};
    int npool[NS] = {150, 90, 10, 0, 33};
    float *q = t_rand_vec((size_t)(M * H * D), 1.0f), *kv = t_rand_vec((size_t)(M * D), 1.0f), *sink = t_rand_vec(H, 2.0f);
    int32_t *sel = xmalloc((size_t)(M * K) * 4);
    for (int i = 0; i < M * K; i++) sel[i] = -1;
    pair_t tq = putf(q, M, H * D), tk = putf(kv, M, D), ts = putf(sink, 1, H), rings[NS];
    paged_pair_t pools[NS], keys[NS];
    bk_span_t gs[NS], cs[NS];
    float *iq = rand_keys((size_t)(M * HI * DI), true), *iw = t_rand_vec((size_t)(M * HI), 1.0f), *kh[NS];
    for (int i = 0; i < NS; i++) {
        float *r = t_rand_vec((size_t)(W * D), 1.0f), *p = t_rand_vec((size_t)(npool[i] + 1) * D, 1.0f);
        int32_t *si = rand_sel((int)sp[i].n, K, npool[i]);
        memcpy(sel + sp[i].r0 * K, si, (size_t)(sp[i].n * K) * 4);
        kh[i] = rand_keys((size_t)(npool[i] + 1) * DI, true);
        rings[i] = putf(r, W, D), pools[i] = put_paged(p, npool[i] + 1, D), keys[i] = put_paged(kh[i], npool[i] + 1, DI);
        gs[i] = cs[i] = sp[i];
        gs[i].ring = rings[i].g, cs[i].ring = rings[i].c;
        gs[i].pool = first_rows(pools[i].g, npool[i]), cs[i].pool = first_rows(pools[i].c, npool[i]);
        gs[i].keys = first_rows(keys[i].g, npool[i]), cs[i].keys = first_rows(keys[i].c, npool[i]);
        free(r), free(p), free(si);
    }
    pair_t tsel = puti(sel, M, K), o = out2(BK_F32, M, H * D), o1 = out2(BK_F32, M, H * D);
    pair_t tiq = putf(iq, M, HI * DI), tiw = putf(iw, M, HI);
    poison_on(cpu, o.c);
    cpu->attention_spans(cpu, o.c, tq.c, ts.c, 0.07f, tk.c, W, cs, NS, &tsel.c, NULL);
    /* the indexer's keys sit at their groups' positions: span i's rows see (pos + 1) / 2 of its entries */
    for (int i = 0; i < NS; i++) gs[i].pos0 = cs[i].pos0 = 2 * npool[i] - sp[i].n + 3 * i - 9 > 0 ? 2 * npool[i] - sp[i].n + 3 * i - 9 : 0;
    pair_t s1 = out2(BK_I32, M, KI), b1 = out2(BK_I32, M, KB), s2 = out2(BK_I32, M, KI), b2 = out2(BK_I32, M, KB);
    int32_t cbk[M * KB], csel[M * KI];
    cpu->indexer_spans(cpu, s1.c, &b1.c, tiq.c, tiw.c, cs, NS, 2, NULL, BSZ, 0.1f, 0.3f);
    cpu->download(cpu, csel, s1.c), cpu->download(cpu, cbk, b1.c);
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        backend_cuda_precision(gpu, precs[pr].p);
        for (int i = 0; i < NS; i++) gs[i].pos0 = sp[i].pos0;
        poison(o.g), poison(o1.g);
        gpu->attention_spans(gpu, o.g, tq.g, ts.g, 0.07f, tk.g, W, gs, NS, &tsel.g, NULL);
        for (int i = 0; i < NS; i++) gpu->attention_spans(gpu, o1.g, tq.g, ts.g, 0.07f, tk.g, W, gs + i, 1, &tsel.g, NULL);
        char what[96];
        snprintf(what, sizeof what, "attention_spans, prefill and decode spans, %s", precs[pr].name);
        compare(o, precs[pr].attn_tol, what); /* NaN where the CPU kept the poison: rows outside the spans */
        /* the same bits: rows on the tensor cores, and one-row spans (cut into the same key ranges) */
        float *u = t_download(gpu, o.g), *v = t_download(gpu, o1.g);
        bool tc = precs[pr].p == CUDA_BF16X2 || precs[pr].p == CUDA_BF16;
        int diff = 0;
        for (int i = 0; i < NS; i++)
            if (sp[i].n == 1 || (tc && sp[i].n >= 32))
                diff += memcmp(u + sp[i].r0 * H * D, v + sp[i].r0 * H * D, (size_t)(sp[i].n * H * D) * 4) != 0;
        CHECKF(diff == 0, "attention_spans %s: %d spans differ batched and alone", precs[pr].name, diff);
        free(u), free(v);
        /* indexer: batched == one span at a time, bit for bit; selections == the CPU's (exact inputs) */
        for (int i = 0; i < NS; i++) gs[i].pos0 = cs[i].pos0;
        poison(s1.g), poison(b1.g), poison(s2.g), poison(b2.g);
        gpu->indexer_spans(gpu, s1.g, &b1.g, tiq.g, tiw.g, gs, NS, 2, NULL, BSZ, 0.1f, 0.3f);
        for (int i = 0; i < NS; i++) gpu->indexer_spans(gpu, s2.g, &b2.g, tiq.g, tiw.g, gs + i, 1, 2, NULL, BSZ, 0.1f, 0.3f);
        int32_t a[M * KI], b[M * KI], ab[M * KB], bb[M * KB];
        gpu->download(gpu, a, s1.g), gpu->download(gpu, b, s2.g), gpu->download(gpu, ab, b1.g), gpu->download(gpu, bb, b2.g);
        CHECKF(!memcmp(a, b, sizeof a) && !memcmp(ab, bb, sizeof ab), "indexer_spans %s: batched differs from one span at a time",
               precs[pr].name);
        int bad = 0, kept = 0;
        double sc[200];
        for (int i = 0; i < NS; i++)
            for (int64_t r = 0; r < sp[i].n; r++) {
                int64_t row = sp[i].r0 + r, nvis = (cs[i].pos0 + r + 1) / 2 < npool[i] ? (cs[i].pos0 + r + 1) / 2 : npool[i];
                ref_scores(iq + row * HI * DI, iw + row * HI, kh[i], HI, DI, (int)nvis, 0.1f, 0.3f, sc);
                bad += !row_agrees(a + row * KI, csel + row * KI, KI, ab + row * KB, cbk + row * KB, KB, BSZ, sc, (int)nvis, 1e-5);
            }
        CHECKF(bad == 0, "indexer_spans %s: %d rows select differently from the CPU beyond ties", precs[pr].name, bad);
        for (int r = 0; r < M; r++) /* rows 43, 44 and 116.. are in no span: still poisoned */
            if ((r >= 43 && r < 45) || r >= 116)
                for (int k = 0; k < KI; k++) kept += a[r * KI + k] == 0x7FC00000;
        CHECK_EQ(kept, 6 * KI);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
    pair_t *all[] = {&tq, &tk, &ts, &tsel, &o, &o1, &tiq, &tiw, &s1, &b1, &s2, &b2};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
    for (int i = 0; i < NS; i++) free2(&rings[i]), free_paged(&pools[i]), free_paged(&keys[i]), free(kh[i]);
    free(q), free(kv), free(sink), free(sel), free(iq), free(iw);
}

static void test_router(void) {
    int cases[][3] = {{5, 9, 3}, {50, 384, 6}, {1, 384, 6}, {3, 4000, 8} /* a row a block */, {4, 130, 1},
                      {2, 513, 33} /* more slots than lanes, experts past one pass of loads */};
    for (size_t t = 0; t < DI_ARRAY_LEN(cases); t++) {
        int m = cases[t][0], E = cases[t][1], k = cases[t][2];
        float *u = t_rand_vec((size_t)(m * E), 3.0f), *bias = t_rand_vec((size_t)E, 0.5f);
        u[0] = u[1] = 30.0f;
        bias[0] = bias[1] = 0.0f;
        for (int e = 2; e < E; e += e < 34 ? 32 : 480) u[e] = 29.0f, bias[e] = 0.0f; /* ties a lane meets: 2, 34, 514, ... */
        pair_t tu = putf(u, m, E), tb = putf(bias, 1, E), idx = out2(BK_I32, m, k), wt = out2(BK_F32, m, k);
        for (int norm = 0; norm < 2; norm++) {
            gpu->router(gpu, idx.g, wt.g, tu.g, tb.g, 1.0f, norm, 1.5f);
            cpu->router(cpu, idx.c, wt.c, tu.c, tb.c, 1.0f, norm, 1.5f);
            int32_t *gi = xmalloc((size_t)(m * k) * 4), *ci = xmalloc((size_t)(m * k) * 4);
            gpu->download(gpu, gi, idx.g), cpu->download(cpu, ci, idx.c);
            CHECK(!memcmp(gi, ci, (size_t)(m * k) * 4));
            compare(wt, 1e-5, "router weights");
            free(gi), free(ci);
        }
        free2(&tu), free2(&tb), free2(&idx), free2(&wt);
        free(u), free(bias);
    }
}

/* The gate and the router in one op: at one position (and a split gate) the gate's last block
 * routes; the same bits as matmul then router on the GPU, and the CPU's choices. */
static void test_gate_router(void) {
    int cases[][4] = {{1, 384, 6, 5120} /* the model's */, {1, 9, 3, 96} /* an unsplit gate: the router's launch */,
                      {3, 384, 6, 512} /* several positions */, {1, 513, 33, 1024} /* two passes of loads, slots past a warp */};
    for (size_t t = 0; t < DI_ARRAY_LEN(cases); t++) {
        int m = cases[t][0], E = cases[t][1], k = cases[t][2], D = cases[t][3];
        weight_t g = make_weight(WQ_BF16, E, D, 0);
        float *x = t_rand_vec((size_t)(m * D), 1.0f), *bias = t_rand_vec((size_t)E, 0.5f);
        pair_t tx = putf(x, m, D), tb = putf(bias, 1, E), i1 = out2(BK_I32, m, k), w1 = out2(BK_F32, m, k), l1 = out2(BK_F32, m, E);
        pair_t i2 = out2(BK_I32, m, k), w2 = out2(BK_F32, m, k), l2 = out2(BK_F32, m, E);
        for (int norm = 0; norm < 2; norm++) {
            poison(i1.g), poison(w1.g), poison(l1.g);
            gpu->gate_router(gpu, i1.g, w1.g, l1.g, tx.g, g.g, tb.g, 1.3f, norm, 1.5f);
            gpu->matmul(gpu, l2.g, tx.g, g.g, 0);
            gpu->router(gpu, i2.g, w2.g, l2.g, tb.g, 1.3f, norm, 1.5f);
            cpu->gate_router(cpu, i1.c, w1.c, l1.c, tx.c, g.c, tb.c, 1.3f, norm, 1.5f);
            pair_t *fused[] = {&i1, &w1, &l1}, *apart[] = {&i2, &w2, &l2};
            for (int q = 0; q < 3; q++) {
                void *a = t_download(gpu, fused[q]->g), *b = t_download(gpu, apart[q]->g);
                CHECKF(!memcmp(a, b, (size_t)(m * (q == 2 ? E : k)) * 4),
                       "m %d E %d k %d D %d: gate_router's %s differ from matmul then router", m, E, k, D,
                       q == 0 ? "experts" : q == 1 ? "weights" : "logits");
                free(a), free(b);
            }
            int32_t *gi = (int32_t *)t_download(gpu, i1.g), *ci = (int32_t *)t_download(cpu, i1.c);
            CHECKF(!memcmp(gi, ci, (size_t)(m * k) * 4), "m %d E %d: gate_router's experts differ from the CPU's", m, E);
            free(gi), free(ci);
            compare(l1, 1e-5, "gate_router logits");
            compare(w1, 1e-5, "gate_router weights");
        }
        pair_t *all[] = {&tx, &tb, &i1, &w1, &l1, &i2, &w2, &l2};
        for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
        free_weight(&g);
        free(x), free(bias);
    }
}

/* ---- the batched forms: many sequences' rows in one launch ------------------------------------- */
/* Spans of one row each, one of three rows and one of none, row 1 in no span. */
static int make_spans(bk_span_t *sp, int64_t m) {
    int n = 0;
    sp[n++] = (bk_span_t){.r0 = 0, .n = 1, .pos0 = 4000};
    sp[n++] = (bk_span_t){.r0 = 2, .n = 3, .pos0 = 130};
    sp[n++] = (bk_span_t){.r0 = 5, .n = 0, .pos0 = 9};
    for (int64_t r = 5; r < m; r++) sp[n++] = (bk_span_t){.r0 = r, .n = 1, .pos0 = 200 + 37 * r};
    return n;
}

/* rope_qat_spans in one launch (and op by op where the kernel does not take the shape): the
 * bits of rope then qat on the GPU over every span's rows, in place or from another tensor, one
 * span or several, QAT on or off a span; the rows of spans without QAT near the CPU's (rope's
 * tolerance: the QAT'd ones can flip a level where the two rotations differ in the last bit). */
static void test_rope_qat(void) {
    enum { M = 12 };
    struct {
        int64_t cols, hd, half;
        qat_kind_t kind;
        int block;
        bool in_place;
        int64_t step;
    } cases[] = {{512, 512, 32, QAT_FP8_UE8M0, 32, true, 1} /* the window KV */,
                 {128, 128, 32, QAT_FP4_UE8M0, 32, true, 2} /* the compressor's keys */,
                 {512, 512, 32, QAT_FP4_E4M3, 16, false, 2} /* its entries, from the latents */,
                 {4096, 128, 32, QAT_FP4_UE8M0, 32, true, 1} /* the indexer's query, 32 heads */,
                 {100, 50, 6, QAT_FP4_E4M3, 16, false, 1} /* heads of 50 channels: op by op */,
                 {72, 36, 9, QAT_FP8_UE8M0, 32, false, 3} /* a partial QAT block; the turned part at 18 */};
    bk_span_t sp[M + 2];
    int ns = make_spans(sp, M);
    for (int i = 0; i < ns; i++) sp[i].qat = i % 2 == 0;
    bk_span_t lone = sp[1]; /* one span (the kernel's scalar form), QAT on */
    lone.qat = true;
    for (size_t t = 0; t < DI_ARRAY_LEN(cases); t++)
        for (int one = 0; one < 2; one++) {
            int64_t C = cases[t].cols, hd = cases[t].hd, half = cases[t].half;
            const bk_span_t *s = one ? &lone : sp;
            int n = one ? 1 : ns;
            float *x = t_rand_vec((size_t)(M * C), 1.0f), *f = xmalloc((size_t)half * 4);
            for (int p = 0; p < half; p++) f[p] = powf(0.8f, (float)p);
            pair_t tx = putf(x, M, C), tf = putf(f, 1, half), to = out2(BK_F32, M, C);
            bk_tensor_t ref = gpu->alloc(gpu, BK_F32, M, C);
            gpu->upload(gpu, ref, x);
            for (int i = 0; i < n; i++) {
                bk_tensor_t r = bk_rows(ref, s[i].r0, s[i].n);
                gpu->rope(gpu, r, (int)hd, tf.g, s[i].pos0, cases[t].step, false);
                if (s[i].qat) gpu->qat(gpu, r, cases[t].kind, cases[t].block);
            }
            bk_tensor_t og = cases[t].in_place ? tx.g : to.g, oc = cases[t].in_place ? tx.c : to.c;
            gpu->rope_qat_spans(gpu, og, tx.g, (int)hd, tf.g, s, n, cases[t].step, cases[t].kind, cases[t].block);
            cpu->rope_qat_spans(cpu, oc, tx.c, (int)hd, tf.c, s, n, cases[t].step, cases[t].kind, cases[t].block);
            float *g = t_download(gpu, og), *c = t_download(cpu, oc), *e = t_download(gpu, ref);
            int diff = 0;
            double err = 0;
            for (int i = 0; i < n; i++)
                for (int64_t r = s[i].r0; r < s[i].r0 + s[i].n; r++) {
                    diff += memcmp(g + r * C, e + r * C, (size_t)C * 4) != 0;
                    if (!s[i].qat) err = fmax(err, t_max_err(g + r * C, c + r * C, (size_t)C));
                }
            if (cases[t].in_place) diff += memcmp(g + C, x + C, (size_t)C * 4) != 0; /* row 1: in no span */
            CHECKF(diff == 0 && err <= 1e-5, "rope_qat case %zu%s: %d rows differ from rope then qat, error %.3g to the CPU", t,
                   one ? " (one span)" : "", diff, err);
            gpu->release(gpu, &ref);
            free2(&tx), free2(&tf), free2(&to);
            free(x), free(f), free(g), free(c), free(e);
        }
}

static void test_batched_forms(void) {
    enum { M = 12 };
    bk_span_t sp[M + 2];
    int ns = make_spans(sp, M);
    /* rope_spans, several spans and one */
    int64_t hd = 64, half = 32;
    float *x = t_rand_vec((size_t)(M * 2 * hd), 1.0f), f[32];
    for (int p = 0; p < half; p++) f[p] = powf(0.8f, (float)p);
    pair_t tx = putf(x, M, 2 * hd), tf = putf(f, 1, half);
    gpu->rope_spans(gpu, tx.g, (int)hd, tf.g, sp, ns, 3, false);
    cpu->rope_spans(cpu, tx.c, (int)hd, tf.c, sp, ns, 3, false);
    compare(tx, 1e-5, "rope_spans");
    gpu->rope_spans(gpu, tx.g, (int)hd, tf.g, sp + 1, 1, 2, true);
    cpu->rope_spans(cpu, tx.c, (int)hd, tf.c, sp + 1, 1, 2, true);
    compare(tx, 1e-5, "rope_spans, one span");
    free2(&tx), free2(&tf);
    free(x);

    /* attention_spans at V4.1 shapes: each span its own ring, pool and window start */
    int H = 64, d = 512, W = 128, K = 64, np = 300;
    float *q = t_rand_vec((size_t)(M * H * d), 1.0f), *kv = t_rand_vec((size_t)(M * d), 1.0f), *sink = t_rand_vec((size_t)H, 2.0f);
    int32_t *sel = xmalloc((size_t)(M * K) * 4);
    for (int i = 0; i < M * K; i++) sel[i] = t_rnd() % 7 == 0 ? -1 : (int32_t)(t_rnd() % 190); /* within every pool */
    pair_t tq = putf(q, M, H * d), tk = putf(kv, M, d), ts = putf(sink, 1, H), tsel = puti(sel, M, K);
    pair_t rings[M + 2];
    paged_pair_t pools[M + 2], ikeys[M + 2];
    bk_span_t gs[M + 2], cs[M + 2];
    for (int i = 0; i < ns; i++) {
        float *r = t_rand_vec((size_t)(W * d), 1.0f), *p = t_rand_vec((size_t)(np * d), 1.0f);
        rings[i] = putf(r, W, d), pools[i] = put_paged(p, np, d);
        int64_t vis = np - 11 * i; /* pools of several lengths */
        gs[i] = cs[i] = sp[i];
        gs[i].ring = rings[i].g, cs[i].ring = rings[i].c, gs[i].pool = first_rows(pools[i].g, vis), cs[i].pool = first_rows(pools[i].c, vis);
        gs[i].win_lo = cs[i].win_lo = i == 1 ? sp[i].pos0 - 5 : 0;
        free(r), free(p);
    }
    for (int with_pool = 0; with_pool < 2; with_pool++)
        for (int one = 0; one < 2; one++) {
            pair_t o = out2(BK_F32, M, H * d);
            poison_on(cpu, o.c);
            int first = one ? 1 : 0, n = one ? 1 : ns;
            gpu->attention_spans(gpu, o.g, tq.g, ts.g, 0.05f, tk.g, W, gs + first, n, with_pool ? &tsel.g : NULL, NULL);
            cpu->attention_spans(cpu, o.c, tq.c, ts.c, 0.05f, tk.c, W, cs + first, n, with_pool ? &tsel.c : NULL, NULL);
            char what[64];
            snprintf(what, sizeof what, "attention_spans pool %d one %d", with_pool, one);
            compare(o, 1e-5, what); /* NaN where the CPU left the poison too: rows outside the spans */
            free2(&o);
        }
    { /* a one-row span gives the same bits batched or alone (its keys are cut the same way) */
        pair_t o = out2(BK_F32, M, H * d), o1 = out2(BK_F32, M, H * d);
        gpu->attention_spans(gpu, o.g, tq.g, ts.g, 0.05f, tk.g, W, gs, ns, &tsel.g, NULL);
        for (int i = 0; i < ns; i++) gpu->attention_spans(gpu, o1.g, tq.g, ts.g, 0.05f, tk.g, W, gs + i, 1, &tsel.g, NULL);
        float *u = t_download(gpu, o.g), *v = t_download(gpu, o1.g);
        int diff = 0;
        for (int i = 0; i < ns; i++)
            if (gs[i].n == 1) diff += memcmp(u + gs[i].r0 * H * d, v + gs[i].r0 * H * d, (size_t)(H * d) * 4) != 0;
        CHECKF(diff == 0, "%d one-row spans differ batched and alone", diff);
        free2(&o), free2(&o1);
        free(u), free(v);
    }
    { /* with unrope the output comes back turned from RoPE's frame (at decode rows in the merge):
       * the same bits as attention then rope_spans' inverse, and the CPU's */
        float fq[32];
        for (int p = 0; p < 32; p++) fq[p] = powf(0.7f, (float)p);
        pair_t tfq = putf(fq, 1, 32), o = out2(BK_F32, M, H * d), o1 = out2(BK_F32, M, H * d);
        poison_on(cpu, o.c);
        gpu->attention_spans(gpu, o.g, tq.g, ts.g, 0.05f, tk.g, W, gs, ns, &tsel.g, &tfq.g);
        gpu->attention_spans(gpu, o1.g, tq.g, ts.g, 0.05f, tk.g, W, gs, ns, &tsel.g, NULL);
        gpu->rope_spans(gpu, o1.g, d, tfq.g, gs, ns, 1, true);
        cpu->attention_spans(cpu, o.c, tq.c, ts.c, 0.05f, tk.c, W, cs, ns, &tsel.c, &tfq.c);
        float *u = t_download(gpu, o.g), *v = t_download(gpu, o1.g);
        int diff = 0;
        for (int i = 0; i < ns; i++) diff += memcmp(u + gs[i].r0 * H * d, v + gs[i].r0 * H * d, (size_t)(gs[i].n * H * d) * 4) != 0;
        CHECKF(diff == 0, "attention_spans with unrope: %d spans differ from attention then rope_spans", diff);
        compare(o, 1e-5, "attention_spans with unrope");
        free2(&o), free2(&o1), free2(&tfq);
        free(u), free(v);
    }
    /* indexer_spans: each span its own keys; equal to the one-span calls on the same backend */
    int Hi = 8, di = 64, KB = 6, KI = 16, bsz = 4;
    float *iq = t_rand_vec((size_t)(M * Hi * di), 1.0f), *iw = t_rand_vec((size_t)(M * Hi), 1.0f);
    pair_t tiq = putf(iq, M, Hi * di), tiw = putf(iw, M, Hi);
    for (int i = 0; i < ns; i++) {
        float *kh = t_rand_vec((size_t)(150 * di), 1.0f);
        ikeys[i] = put_paged(kh, 150, di);
        free(kh);
        gs[i].keys = first_rows(ikeys[i].g, 150 - 9 * i), cs[i].keys = first_rows(ikeys[i].c, 150 - 9 * i);
        gs[i].pos0 = cs[i].pos0 = 2 * (150 - 9 * i) - 7 * (i % 3);
    }
    pair_t s1 = out2(BK_I32, M, KI), b1 = out2(BK_I32, M, KB), s2 = out2(BK_I32, M, KI), b2 = out2(BK_I32, M, KB);
    pair_t s3 = out2(BK_I32, M, KI);
    gpu->indexer_spans(gpu, s1.g, &b1.g, tiq.g, tiw.g, gs, ns, 2, NULL, bsz, 0.1f, 0.3f);
    gpu->indexer_spans(gpu, s3.g, NULL, tiq.g, tiw.g, gs, ns, 2, &b1.g, bsz, 0.1f, 0.3f);
    for (int i = 0; i < ns; i++) {
        bk_tensor_t bb = bk_rows(b2.g, gs[i].r0, gs[i].n);
        gpu->indexer_topk(gpu, bk_rows(s2.g, gs[i].r0, gs[i].n), &bb, bk_rows(tiq.g, gs[i].r0, gs[i].n),
                          bk_rows(tiw.g, gs[i].r0, gs[i].n), gs[i].keys, gs[i].pos0, 2, NULL, bsz, 0.1f, 0.3f);
    }
    int32_t a[M * KI], b[M * KI], c[M * KI];
    gpu->download(gpu, a, s1.g), gpu->download(gpu, b, s2.g);
    CHECK(!memcmp(a, b, sizeof a)); /* rows outside the spans keep their poison in both */
    gpu->download(gpu, a, b1.g), gpu->download(gpu, b, b2.g);
    CHECK(!memcmp(a, b, (size_t)(M * KB) * 4));
    for (int i = 0; i < ns; i++) { /* the restricted user */
        bk_tensor_t bb = bk_rows(b1.g, gs[i].r0, gs[i].n);
        gpu->indexer_topk(gpu, bk_rows(s2.g, gs[i].r0, gs[i].n), NULL, bk_rows(tiq.g, gs[i].r0, gs[i].n),
                          bk_rows(tiw.g, gs[i].r0, gs[i].n), gs[i].keys, gs[i].pos0, 2, &bb, bsz, 0.1f, 0.3f);
    }
    gpu->download(gpu, c, s3.g), gpu->download(gpu, b, s2.g);
    CHECK(!memcmp(c, b, sizeof c));
    /* copy_many: the batch's window writes */
    bk_tensor_t gd[M + 2], gsrc[M + 2], cd[M + 2], csrc[M + 2];
    for (int i = 0; i < ns; i++) {
        int64_t slot = (7 * i) % (W - 3);
        gd[i] = bk_rows(rings[i].g, slot, sp[i].n), cd[i] = bk_rows(rings[i].c, slot, sp[i].n);
        gsrc[i] = bk_rows(tk.g, sp[i].r0, sp[i].n), csrc[i] = bk_rows(tk.c, sp[i].r0, sp[i].n);
    }
    gpu->copy_many(gpu, gd, gsrc, ns);
    cpu->copy_many(cpu, cd, csrc, ns);
    for (int i = 0; i < ns; i++) compare(rings[i], 0, "copy_many");
    pair_t *all[] = {&tq, &tk, &ts, &tsel, &tiq, &tiw, &s1, &b1, &s2, &b2, &s3};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
    for (int i = 0; i < ns; i++) free2(&rings[i]), free_paged(&pools[i]), free_paged(&ikeys[i]);
    free(q), free(kv), free(sink), free(sel), free(iq), free(iw);
}

/* One expert on one row in double with the GPU's rounding points (act: the activations into
 * quantized weights as they are, rounded to bf16, or in e4m3 by blocks of 128 as the fp8
 * precision's tensor cores take them, lib/qat.h), added into acc. */
enum { ACT_F32, ACT_BF16, ACT_FP8 };
static void expert_ref(const weight_t *w, int act, const float *x, int D, int I, double weight, float limit, double *acc) {
    double *h = xmalloc((size_t)I * 8);
    float *x8 = xmalloc((size_t)D * 4), *h8 = xmalloc((size_t)I * 4);
    memcpy(x8, x, (size_t)D * 4);
    if (act == ACT_FP8) qat_apply(QAT_FP8_UE8M0, 128, x8, (size_t)D);
    for (int i = 0; i < I; i++) {
        double g = 0, u = 0;
        for (int c = 0; c < D; c++) {
            double xv = act == ACT_BF16 ? bf16_round(x[c]) : x8[c];
            g += (double)w[0].host.dense[i * D + c] * xv, u += (double)w[2].host.dense[i * D + c] * xv;
        }
        if (limit > 0) g = fmin(g, limit), u = fmax(fmin(u, limit), -limit);
        h[i] = weight * (g / (1 + exp(-g)) * u);
        if (act == ACT_BF16) h[i] = bf16_round((float)h[i]);
        h8[i] = (float)h[i];
    }
    if (act == ACT_FP8) {
        qat_apply(QAT_FP8_UE8M0, 128, h8, (size_t)I);
        for (int i = 0; i < I; i++) h[i] = h8[i];
    }
    free(x8), free(h8);
    for (int d = 0; d < D; d++) {
        double y = 0;
        for (int i = 0; i < I; i++) y += (double)w[1].host.dense[d * I + i] * h[i];
        acc[d] += y;
    }
    free(h);
}

/* Skewed routing (E >= k + 5): every row's first expert is 0 (all m positions), row 0's second
 * is E-1 (one position), E-4..E-2 get none, the rest are drawn with weights e^2 (from a few
 * positions to most rows). */
static int32_t skewed_expert(int r, int s, int E) {
    if (s == 0) return 0;
    if (r == 0 && s == 1) return E - 1;
    uint64_t total = 0, x;
    for (int e = 1; e <= E - 5; e++) total += (uint64_t)(e * e);
    x = t_rnd() % total;
    for (int e = 1; e <= E - 5; e++) {
        if (x < (uint64_t)(e * e)) return e;
        x -= (uint64_t)(e * e);
    }
    return 1;
}

/* E routed experts of one kind (1 x 32 blocks, as the released FP4) and a shared expert (FP8
 * with 32 x 32 blocks as released, or the routed kind when that is F32/BF16), bound on both
 * backends. */
enum { MAX_TEST_EXPERTS = 16 };
typedef struct {
    int n;
    weight_t w[MAX_TEST_EXPERTS][3], sh[3];
    bk_expert_t g[MAX_TEST_EXPERTS], c[MAX_TEST_EXPERTS], shg, shc;
} experts_t;

static void make_experts(experts_t *x, wq_kind_t kind, int E, int D, int I) {
    wq_kind_t sk = kind == WQ_FP8 || kind == WQ_FP4 ? WQ_FP8 : kind;
    x->n = E;
    for (int e = 0; e < E; e++) {
        weight_t *w = x->w[e];
        w[0] = make_weight(kind, I, D, 1), w[1] = make_weight(kind, D, I, 1), w[2] = make_weight(kind, I, D, 1);
        x->g[e] = (bk_expert_t){w[0].g, w[1].g, w[2].g}, x->c[e] = (bk_expert_t){w[0].c, w[1].c, w[2].c};
    }
    x->sh[0] = make_weight(sk, I, D, 32), x->sh[1] = make_weight(sk, D, I, 32), x->sh[2] = make_weight(sk, I, D, 32);
    x->shg = (bk_expert_t){x->sh[0].g, x->sh[1].g, x->sh[2].g}, x->shc = (bk_expert_t){x->sh[0].c, x->sh[1].c, x->sh[2].c};
}

static void free_experts(experts_t *x) {
    for (int e = 0; e < x->n; e++)
        for (int j = 0; j < 3; j++) free_weight(&x->w[e][j]);
    for (int j = 0; j < 3; j++) free_weight(&x->sh[j]);
}

/* Row r's K experts of E for the invariance tests: (r * step + 3k + r % wobble) mod E, distinct
 * within a row while 3 (K - 1) < E. */
static void spread_routes(int32_t *idx, int M, int K, int E, int step, int wobble) {
    for (int r = 0; r < M; r++)
        for (int k = 0; k < K; k++) idx[r * K + k] = (int32_t)((r * step + k * 3 + (r % wobble)) % E);
}

/* The forward's MoE: the shared expert (mlp) on a branch, added by moe, which joins it. */
static void moe_shared(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *ex,
                       int E, const bk_expert_t *shared, float limit) {
    if (!shared) {
        bk->moe(bk, out, x, idx, wt, ex, E, NULL, NULL, limit);
        return;
    }
    bk_tensor_t ys = bk->alloc(bk, BK_F32, x.rows, x.cols);
    bk->branch_begin(bk);
    bk->mlp(bk, ys, x, shared, limit);
    bk->branch_end(bk);
    bk->moe(bk, out, x, idx, wt, ex, E, &ys, NULL, limit);
    bk->release(bk, &ys);
}

static void moe_case(int m, int D, int I, int E, int k, wq_kind_t kind, bool with_shared, bool skewed) {
    bool quant = kind == WQ_FP8 || kind == WQ_FP4;
    /* the fp8 precision's e4m3 activations: FP4 experts on the tensor cores (32+ positions an expert) */
    bool fp8 = precision == CUDA_FP8 && kind == WQ_FP4 && m * k >= 32 * (E < m * k ? E : m * k) && D % 128 == 0 && I % 128 == 0 &&
               !spread_fp4_scales;
    experts_t ex;
    make_experts(&ex, kind, E, D, I);
    float *x = t_rand_vec((size_t)(m * D), 2.0f), *wt = t_rand_vec((size_t)(m * k), 1.0f);
    int32_t *idx = xmalloc((size_t)(m * k) * 4);
    for (int r = 0; r < m; r++)
        for (int s = 0; s < k; s++) {
            int32_t e;
            bool dup;
            do { /* distinct experts per row, as the router gives */
                e = skewed ? skewed_expert(r, s, E) : (int32_t)(t_rnd() % (uint64_t)E);
                dup = false;
                for (int t = 0; t < s; t++) dup |= idx[r * k + t] == e;
            } while (dup);
            idx[r * k + s] = e;
        }
    idx[k - 1] = -1; /* an empty slot is skipped */
    pair_t tx = putf(x, m, D), ti = puti(idx, m, k), tw = putf(wt, m, k), o = out2(BK_F32, m, D);
    double *ref = xmalloc((size_t)(m * D) * 8);
    float *reff = xmalloc((size_t)(m * D) * 4);
    for (int lim = 0; lim < 2; lim++) {
        float limit = lim ? 0.7f : 0.0f;
        poison(o.g);
        moe_shared(gpu, o.g, tx.g, ti.g, tw.g, ex.g, E, with_shared ? &ex.shg : NULL, limit);
        moe_shared(cpu, o.c, tx.c, ti.c, tw.c, ex.c, E, with_shared ? &ex.shc : NULL, limit);
        float *g = t_download(gpu, o.g), *c = t_download(cpu, o.c);
        /* the reference with the tensor cores' bf16 roundings or without (CUDA cores), for the routed
         * and the shared experts (dense) each; in fp8 the routed experts' e4m3 activations (e_fp8: the
         * relative L2 to the references that round them), and (e_bf16, rounds 5 and 7) bf16 ones, which
         * must be further away (the largest error can lie where both agree) */
        double e = INFINITY, e_fp8 = INFINITY, e_bf16 = INFINITY;
        for (int round = 0; round < (fp8 ? 8 : 4); round++) {
            int routed_act = fp8 && round < 4 ? ACT_FP8 : ACT_BF16;
            memset(ref, 0, (size_t)(m * D) * 8);
            for (int r = 0; r < m; r++) {
                for (int s = 0; s < k; s++)
                    if (idx[r * k + s] >= 0)
                        expert_ref(ex.w[idx[r * k + s]], quant && (round & 1) ? routed_act : ACT_F32, x + r * D, D, I,
                                   wt[r * k + s], limit, ref + r * D);
                if (with_shared) expert_ref(ex.sh, kind != WQ_F32 && (round & 2) ? ACT_BF16 : ACT_F32, x + r * D, D, I, 1.0, limit, ref + r * D);
            }
            for (int i = 0; i < m * D; i++) reff[i] = (float)ref[i];
            if (round < 4) e = fmin(e, t_max_err(g, reff, (size_t)(m * D)));
            double l2r = fp8 && (round & 1) ? t_rel_l2(g, reff, (size_t)(m * D)) : INFINITY;
            if (round < 4) e_fp8 = fmin(e_fp8, l2r);
            else e_bf16 = fmin(e_bf16, l2r);
        }
        double l2 = t_rel_l2(g, c, (size_t)(m * D));
        /* fp8: some of the GPU's activations of w2 (the FP8 tensor cores' sums, fewer bits) round to
         * the other e4m3 neighbour than the reference's (P23 of MODEL_V41.md), each moving its row's
         * outputs by up to a few percent: relative L2 4e-3 to the e4m3 reference, 4e-2 to the bf16 one */
        CHECKF(e <= (fp8 ? 5e-2 : quant ? 5e-3 : 1e-4), "moe m %d D %d I %d E %d limit %g: error %.3g vs the reference with the same roundings",
               m, D, I, E, limit, e);
        CHECKF(!fp8 || (e_fp8 <= 1e-2 && 4 * e_fp8 < e_bf16),
               "moe m %d D %d I %d E %d limit %g: relative L2 %.3g to the e4m3 reference, %.3g to the bf16 one", m, D, I, E, limit,
               e_fp8, e_bf16);
        if (fp8)
            printf("  moe fp8 m %d D %d I %d E %d limit %g: error %.2e; relative L2 %.2e to the e4m3 reference, %.2e to the bf16 one\n",
                   m, D, I, E, limit, e, e_fp8, e_bf16);
        /* bf16 activations against fp32 ones: a value rounded across the clamp moves an output by
         * a few percent (seen up to 3.2e-2 with limit 0.7) */
        CHECKF(l2 <= (fp8 ? 0.15 : quant ? 6e-2 : 1e-5), "moe m %d D %d I %d E %d: relative L2 %.3g vs the fp32 CPU", m, D, I, E, l2);
        printf("  moe m %d D %d I %d E %d k %d%s limit %g: %.2e vs the same roundings, relative L2 %.2e vs the fp32 CPU\n", m, D,
               I, E, k, skewed ? " skewed" : "", limit, e, l2);
        free(g), free(c);
    }
    free_experts(&ex);
    free2(&tx), free2(&ti), free2(&tw), free2(&o);
    free(x), free(wt), free(idx), free(ref), free(reff);
}

static void test_moe(void) {
    set_precision(CUDA_FP8); /* e4m3 activations into the routed experts (D, I multiples of 128), the rest bf16 */
    moe_case(300, 256, 128, 16, 6, WQ_FP4, false, false); /* routed alone: the shared expert's sum would hide them */
    moe_case(300, 384, 256, 16, 6, WQ_FP4, false, true);  /* skewed: empty experts, 1 to 300 positions */
    moe_case(40, 256, 128, 9, 3, WQ_FP4, false, false); /* few positions an expert: bf16, 8 a pass */
    spread_fp4_scales = true; /* a layer whose scales the form cannot take exactly: bf16 */
    moe_case(300, 256, 128, 16, 6, WQ_FP4, false, false);
    spread_fp4_scales = false;
    set_precision(CUDA_BF16X3);
    backend_cuda_precision(gpu, CUDA_BF16);
    moe_case(300, 128, 64, 16, 6, WQ_FP4, true, false); /* tensor cores, rounded activations */
    moe_case(300, 384, 256, 16, 6, WQ_FP4, false, true); /* skewed: an expert's positions over several tiles */
    moe_case(40, 128, 64, 9, 3, WQ_FP4, false, false);  /* tensor cores 8 positions a pass, rounded activations */
    backend_cuda_precision(gpu, CUDA_BF16X3);
    moe_case(5, 37, 19, 4, 2, WQ_FP4, true, false);   /* odd shapes: the plain kernel */
    moe_case(5, 64, 96, 9, 3, WQ_FP4, true, false);   /* tensor cores 8 positions a pass, about one per expert */
    moe_case(1, 64, 96, 9, 3, WQ_FP4, true, false);   /* one row: a block per slot, no dispatch */
    moe_case(1, 64, 96, 9, 6, WQ_FP8, false, false);
    moe_case(70, 64, 96, 9, 3, WQ_FP4, true, false);  /* the same, several passes per expert */
    moe_case(40, 64, 96, 9, 3, WQ_FP8, false, false); /* the same, FP8 experts */
    moe_case(24, 2112, 64, 4, 2, WQ_FP4, false, false); /* a long reduction (test_moe_tcs stages one in two chunks) */
    moe_case(300, 128, 64, 16, 6, WQ_FP4, false, false); /* tensor cores: 32+ positions per expert */
    moe_case(200, 64, 96, 4, 2, WQ_FP4, true, false);
    moe_case(6, 64, 32, 5, 2, WQ_F32, true, false);   /* fp32 experts: exact path */
    moe_case(4, 68, 32, 12, 10, WQ_F32, true, false); /* combine: 10 slots, more than one batch of loads */
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16};
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) { /* tensor cores: empty experts, 1 to 300 positions */
        backend_cuda_precision(gpu, precs[pr]);
        moe_case(300, 96, 160, 16, 6, WQ_FP4, true, true);
        /* the shared expert's fused w1/w3 and its w2 split (plain bf16: its roundings across the
         * clamp move a few rows beyond the L2 bound, 15% of draws; test_moe_batch_invariance and
         * the dense cases cover it) */
        if (precs[pr] != CUDA_BF16) moe_case(3, 1056, 544, 4, 2, WQ_FP4, true, false);
    }
    backend_cuda_precision(gpu, CUDA_FP32);
    moe_case(5, 64, 96, 9, 3, WQ_FP4, true, false);   /* CUDA cores */
    moe_case(70, 64, 96, 9, 3, WQ_FP4, false, false);
    backend_cuda_precision(gpu, CUDA_BF16X3);
}

/* A row's experts give the same bits batched with other rows or alone (decode batches); the
 * shared expert at few positions fused (w1, w3 and the activation in one launch), split or not. */
static void moe_invariance_case(int D, int I) {
    enum { M = 20, E = 9, K = 3 };
    experts_t ex;
    make_experts(&ex, WQ_FP4, E, D, I);
    float *x = t_rand_vec(M * D, 2.0f), *wt = t_rand_vec(M * K, 1.0f);
    int32_t idx[M * K];
    spread_routes(idx, M, K, E, 5, 4);
    pair_t tx = putf(x, M, D), ti = puti(idx, M, K), tw = putf(wt, M, K), o = out2(BK_F32, M, D), o1 = out2(BK_F32, M, D);
    int diff = 0;
    for (int lim = 0; lim < 2; lim++) {
        moe_shared(gpu, o.g, tx.g, ti.g, tw.g, ex.g, E, &ex.shg, lim ? 0.7f : 0.0f);
        for (int r = 0; r < M; r++)
            moe_shared(gpu, bk_rows(o1.g, r, 1), bk_rows(tx.g, r, 1), bk_rows(ti.g, r, 1), bk_rows(tw.g, r, 1), ex.g, E, &ex.shg,
                     lim ? 0.7f : 0.0f);
        float *u = t_download(gpu, o.g), *v = t_download(gpu, o1.g);
        for (int r = 0; r < M; r++) diff += memcmp(u + r * D, v + r * D, D * 4) != 0;
        free(u), free(v);
    }
    CHECKF(diff == 0, "D %d I %d: %d rows differ batched and alone", D, I, diff);
    free2(&tx), free2(&ti), free2(&tw), free2(&o), free2(&o1);
    free_experts(&ex);
    free(x), free(wt);
}

static void test_moe_batch_invariance(void) {
    moe_invariance_case(64, 96);
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16};
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        backend_cuda_precision(gpu, precs[pr]);
        moe_invariance_case(1056, 544);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
}

/* The prefill matmuls' two forms (kernels/matmul_tc.cu: a copying warp where the reduction is
 * whole 64-blocks, else every thread copying; backend_cuda_hopper_forms) give the same bits: dense (two position tiles, 500
 * of 520 rows, split-K at 40 positions), block-diagonal, and the routed experts (their gathered
 * rows in position order), in every tensor-core precision. Returns the outputs' float count
 * compared (the forms ran, or the test fails). */
static int64_t forms_differ(void (*run)(void *), void *ctx, bk_tensor_t out, int64_t *differ) {
    float *u[2];
    for (int f = 0; f < 2; f++) {
        backend_cuda_hopper_forms(gpu, f);
        poison(out);
        run(ctx);
        u[f] = t_download(gpu, out);
    }
    backend_cuda_hopper_forms(gpu, 1);
    int64_t n = out.rows * out.cols;
    for (int64_t i = 0; i < n; i++) *differ += memcmp(&u[0][i], &u[1][i], 4) != 0 || isnan(u[1][i]);
    free(u[0]), free(u[1]);
    return n;
}

typedef struct {
    bk_tensor_t out, x, idx, wt;
    const weight_t *w;
    const experts_t *ex;
    int groups;
} forms_ctx_t;
static void forms_dense(void *p) {
    forms_ctx_t *c = p;
    if (c->groups) gpu->matmul_grouped(gpu, c->out, c->x, c->w->g, c->groups);
    else gpu->matmul(gpu, c->out, c->x, c->w->g, 3);
}
static void forms_moe(void *p) {
    forms_ctx_t *c = p;
    moe_shared(gpu, c->out, c->x, c->idx, c->wt, c->ex->g, c->ex->n, NULL, 0.0f);
}

static void test_tc_forms(void) {
    struct {
        wq_kind_t kind;
        int64_t rows, k, m, n, groups;
    } dense_cases[] = {{WQ_FP8, 523, 1024, 300, 500, 0}, {WQ_FP4, 300, 512, 260, 290, 0}, {WQ_BF16, 300, 512, 260, 290, 0},
                       {WQ_FP8, 523, 1024, 40, 500, 0},  {WQ_FP8, 259, 128, 70, 256, 2},   {WQ_FP4, 387, 64, 50, 384, 3}};
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16};
    int64_t compared = 0, differ = 0;
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        backend_cuda_precision(gpu, precs[pr]);
        for (size_t t = 0; t < DI_ARRAY_LEN(dense_cases); t++) {
            int64_t G = dense_cases[t].groups, k = dense_cases[t].k, m = dense_cases[t].m, n = dense_cases[t].n;
            weight_t w = make_weight(dense_cases[t].kind, dense_cases[t].rows, k, dense_cases[t].kind == WQ_FP8 ? 32 : 1);
            float *x = t_rand_vec((size_t)(m * k * (G ? G : 1)), 1.0f);
            pair_t tx = putf(x, m, k * (G ? G : 1));
            bk_tensor_t o = gpu->alloc(gpu, BK_F32, m, G ? G * (n / G) : n);
            forms_ctx_t c = {.out = o, .x = tx.g, .w = &w, .groups = (int)G};
            compared += forms_differ(forms_dense, &c, o, &differ);
            gpu->release(gpu, &o);
            free2(&tx), free(x);
            free_weight(&w);
        }
        enum { M = 300, D = 128, I = 64, E = 16, K = 6 };
        experts_t ex;
        make_experts(&ex, WQ_FP4, E, D, I);
        float *x = t_rand_vec(M * D, 2.0f), *wt = t_rand_vec(M * K, 1.0f);
        int32_t idx[M * K];
        spread_routes(idx, M, K, E, 5, 4);
        idx[3] = -1; /* an empty slot: positions past the dispatched ones in the scratch */
        pair_t tx = putf(x, M, D), ti = puti(idx, M, K), tw = putf(wt, M, K);
        bk_tensor_t o = gpu->alloc(gpu, BK_F32, M, D);
        forms_ctx_t c = {.out = o, .x = tx.g, .idx = ti.g, .wt = tw.g, .ex = &ex};
        compared += forms_differ(forms_moe, &c, o, &differ);
        gpu->release(gpu, &o);
        free2(&tx), free2(&ti), free2(&tw), free(x), free(wt);
        free_experts(&ex);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
    printf("  %lld outputs compared, %lld differ between the two forms\n", (long long)compared, (long long)differ);
    CHECK(compared > 0);
    CHECK_EQ(differ, 0);
}

/* moe with the hc_expand its output feeds (the forward's FFN site): the combine's launch goes on
 * to the expand, the same bits as moe then the hc_expand op; against the CPU as moe is. */
static void test_moe_expand(void) {
    enum { M = 3, E = 9, K = 3, HC = 4, NM = (2 + HC) * HC, D = 256, I = 96 };
    experts_t ex;
    make_experts(&ex, WQ_FP4, E, D, I);
    float *x = t_rand_vec(M * D, 2.0f), *wt = t_rand_vec(M * K, 1.0f), *X = t_rand_vec(M * HC * D, 1.0f);
    float *cf = t_rand_vec(M * NM, 1.0f);
    int32_t idx[M * K];
    spread_routes(idx, M, K, E, 5, 4);
    pair_t tx = putf(x, M, D), ti = puti(idx, M, K), tw = putf(wt, M, K), tc = putf(cf, M, NM), ys = out2(BK_F32, M, D);
    pair_t X1 = putf(X, M, HC * D), X2 = putf(X, M, HC * D), o1 = out2(BK_F32, M, D), o2 = out2(BK_F32, M, D);
    gpu->mlp(gpu, ys.g, tx.g, &ex.shg, 0.0f);
    cpu->mlp(cpu, ys.c, tx.c, &ex.shc, 0.0f);
    gpu->moe(gpu, o1.g, tx.g, ti.g, tw.g, ex.g, E, &ys.g, &(bk_expand_t){X1.g, tc.g, HC}, 0.0f);
    gpu->moe(gpu, o2.g, tx.g, ti.g, tw.g, ex.g, E, &ys.g, NULL, 0.0f);
    gpu->hc_expand(gpu, X2.g, o2.g, tc.g, HC);
    cpu->moe(cpu, o1.c, tx.c, ti.c, tw.c, ex.c, E, &ys.c, &(bk_expand_t){X1.c, tc.c, HC}, 0.0f);
    float *a = t_download(gpu, X1.g), *b = t_download(gpu, X2.g), *c = t_download(cpu, X1.c);
    float *oa = t_download(gpu, o1.g), *ob = t_download(gpu, o2.g);
    CHECKF(!memcmp(a, b, sizeof(float) * M * HC * D) && !memcmp(oa, ob, sizeof(float) * M * D),
           "moe with its hc_expand differs from moe then hc_expand");
    double l2 = t_rel_l2(a, c, (size_t)(M * HC * D));
    CHECKF(l2 <= 6e-2, "moe with its hc_expand: relative L2 %.3g vs the CPU", l2);
    free(a), free(b), free(c), free(oa), free(ob);
    pair_t *all[] = {&tx, &ti, &tw, &tc, &ys, &X1, &X2, &o1, &o2};
    for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
    free_experts(&ex);
    free(x), free(wt), free(X), free(cf);
}

/* matmul with the hc_expand its output feeds (the forward's attention site, wo_b): at few
 * positions the expand rides in the matmul's epilogue (split or not), the same bits as the
 * matmul then the hc_expand op; against the CPU as the matmul is. */
static void test_matmul_expand(void) {
    enum { HC = 4, NM = (2 + HC) * HC, N = 256 };
    int ks[] = {512, 8192}, ms[] = {1, 3};
    for (size_t ki = 0; ki < DI_ARRAY_LEN(ks); ki++)
        for (size_t mi = 0; mi < DI_ARRAY_LEN(ms); mi++) {
            int K = ks[ki], M = ms[mi];
            weight_t w = make_weight(WQ_FP8, N, K, 32);
            float *x = t_rand_vec((size_t)(M * K), 1.0f), *X = t_rand_vec((size_t)(M * HC * N), 1.0f);
            float *cf = t_rand_vec((size_t)(M * NM), 1.0f);
            pair_t tx = putf(x, M, K), tc = putf(cf, M, NM), X1 = putf(X, M, HC * N), X2 = putf(X, M, HC * N);
            pair_t o1 = out2(BK_F32, M, N), o2 = out2(BK_F32, M, N);
            gpu->matmul_expand(gpu, o1.g, tx.g, w.g, &(bk_expand_t){X1.g, tc.g, HC});
            gpu->matmul(gpu, o2.g, tx.g, w.g, 0);
            gpu->hc_expand(gpu, X2.g, o2.g, tc.g, HC);
            cpu->matmul_expand(cpu, o1.c, tx.c, w.c, &(bk_expand_t){X1.c, tc.c, HC});
            float *a = t_download(gpu, X1.g), *b = t_download(gpu, X2.g), *oa = t_download(gpu, o1.g), *ob = t_download(gpu, o2.g);
            CHECKF(!memcmp(a, b, sizeof(float) * M * HC * N) && !memcmp(oa, ob, sizeof(float) * M * N),
                   "K %d M %d: matmul with its hc_expand differs from matmul then hc_expand", K, M);
            compare(X1, 1e-3, "matmul with its hc_expand vs the CPU");
            free(a), free(b), free(oa), free(ob);
            pair_t *all[] = {&tx, &tc, &X1, &X2, &o1, &o2};
            for (size_t i = 0; i < DI_ARRAY_LEN(all); i++) free2(all[i]);
            free_weight(&w);
            free(x), free(X), free(cf);
        }
}

/* On the tensor cores a position's outputs do not depend on the other positions of the launch
 * (dense position tiles and expert tiles filled differently): the first rows alone give the
 * same bits as within the whole batch, in every precision. */
static void test_tc_batch_invariance(void) {
    enum { M = 300, H = 150, D = 128, I = 96, N = 500, E = 16, K = 6 };
    weight_t wd = make_weight(WQ_FP8, N, D, 32), wb = make_weight(WQ_BF16, N, D, 1);
    experts_t ex;
    make_experts(&ex, WQ_FP4, E, D, I);
    float *x = t_rand_vec(M * D, 2.0f), *wt = t_rand_vec(M * K, 1.0f);
    int32_t idx[M * K];
    spread_routes(idx, M, K, E, 7, 5);
    pair_t tx = putf(x, M, D), ti = puti(idx, M, K), tw = putf(wt, M, K);
    bk_tensor_t o = gpu->alloc(gpu, BK_F32, M, N), oh = gpu->alloc(gpu, BK_F32, H, N);
    bk_tensor_t y = gpu->alloc(gpu, BK_F32, M, D), yh = gpu->alloc(gpu, BK_F32, H, D);
    bk_tensor_t ob = gpu->alloc(gpu, BK_F32, M, N), obh = gpu->alloc(gpu, BK_F32, H, N);
    cuda_precision_t precs[] = {CUDA_BF16X3, CUDA_BF16X2, CUDA_BF16};
    for (size_t pr = 0; pr < DI_ARRAY_LEN(precs); pr++) {
        backend_cuda_precision(gpu, precs[pr]);
        gpu->matmul(gpu, o, tx.g, wd.g, 0);
        gpu->matmul(gpu, oh, bk_rows(tx.g, 0, H), wd.g, 0);
        gpu->matmul(gpu, ob, tx.g, wb.g, 0);
        gpu->matmul(gpu, obh, bk_rows(tx.g, 0, H), wb.g, 0);
        moe_shared(gpu, y, tx.g, ti.g, tw.g, ex.g, E, &ex.shg, 0.0f);
        moe_shared(gpu, yh, bk_rows(tx.g, 0, H), bk_rows(ti.g, 0, H), bk_rows(tw.g, 0, H), ex.g, E, &ex.shg, 0.0f);
        float *a = t_download(gpu, o), *b = t_download(gpu, oh), *c = t_download(gpu, y), *d = t_download(gpu, yh);
        CHECKF(!memcmp(a, b, (size_t)H * N * 4), "precision %d: dense rows differ batched and alone", (int)precs[pr]);
        CHECKF(!memcmp(c, d, (size_t)H * D * 4), "precision %d: expert rows differ batched and alone", (int)precs[pr]);
        float *e = t_download(gpu, ob), *f = t_download(gpu, obh);
        CHECKF(!memcmp(e, f, (size_t)H * N * 4), "precision %d: BF16 dense rows differ batched and alone", (int)precs[pr]);
        free(a), free(b), free(c), free(d), free(e), free(f);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
    gpu->release(gpu, &o), gpu->release(gpu, &oh), gpu->release(gpu, &y), gpu->release(gpu, &yh);
    gpu->release(gpu, &ob), gpu->release(gpu, &obh);
    free2(&tx), free2(&ti), free2(&tw);
    free_weight(&wd), free_weight(&wb);
    free_experts(&ex);
    free(x), free(wt);
}

/* The experts at few positions per expert (matmul_tcs: w1, w3 and the activation in one launch,
 * then w2) in every tensor-core precision, FP4 and FP8: 7 and 5 reduction blocks of 32 (steps
 * whose lanes partly lie past the reduction, an odd number of steps), 131 (staged in two chunks
 * at 8 positions a pass, in one alone), outputs that are no multiple of the 128-row block,
 * expert e with e + 1 positions (one pass or two, one to three instructions per pass), and
 * one expert whose scales are 2^2 (FP4) or 2^9 (FP8) in every fifth block (the steps holding
 * one take the fp32 route, the others the bf16 one; FP8 codes there of the two least exponents,
 * so those products stay near the others': with full-range codes, sums of terms near 10^5
 * can cancel to a gate below the SwiGLU limit, of which fp32 rounding is then a large part;
 * one draw's row was off by 5.8e-4, the same bits before and after this pass's kernels). Each row against the double reference
 * (bf16x3 / bf16x2: within fp32 / 16-bit rounding of the activations, the FP8 weights' large
 * products cancelling, the reduction of 4192 up to 1.01e-4 with limit 0.7; bf16: the reference
 * with the same bf16 roundings), outputs poisoned, and each row alone gives the batched bits
 * (passes of one position instead of eight; blocks of 64 rows for 224 and 160 outputs, and
 * for I 2784 of 112 rows alone, of 128 batched, the last block part filled). */
static void test_moe_tcs(void) {
    enum { M = 9, K = 5, E = 9 };
    struct {
        wq_kind_t kind;
        int D, I;
        cuda_precision_t prec;
        double tol;
    } cases[] = {
        {WQ_FP4, 224, 160, CUDA_BF16X3, 1e-4}, {WQ_FP8, 224, 160, CUDA_BF16X3, 1e-4}, {WQ_FP4, 4192, 96, CUDA_BF16X3, 3e-4},
        {WQ_FP4, 224, 160, CUDA_BF16X2, 1e-3}, {WQ_FP8, 224, 160, CUDA_BF16X2, 1e-3}, {WQ_FP4, 224, 160, CUDA_BF16, 5e-3},
        {WQ_FP8, 160, 224, CUDA_BF16, 5e-3},   {WQ_FP4, 224, 2784, CUDA_BF16X3, 1e-4},
    };
    int32_t idx[M * K];
    int fill[M] = {0};
    for (int e = 0, i = 0; e < E; e++) /* expert e's e + 1 positions on consecutive rows: distinct in a row */
        for (int j = 0; j <= e; j++, i++) idx[(i % M) * K + fill[i % M]++] = e;
    float *wt = t_rand_vec(M * K, 1.0f);
    pair_t ti = puti(idx, M, K), tw = putf(wt, M, K);
    for (size_t cs = 0; cs < DI_ARRAY_LEN(cases); cs++) {
        int D = cases[cs].D, I = cases[cs].I;
        bool round = cases[cs].prec == CUDA_BF16;
        uint8_t big = cases[cs].kind == WQ_FP4 ? 129 : 136; /* past the bf16 multiplier's range */
        backend_cuda_precision(gpu, cases[cs].prec);
        weight_t w[E][3];
        bk_expert_t ex[E];
        for (int e = 0; e < E; e++) {
            for (int j = 0; j < 3; j++) {
                t_weight_t h = t_weight_random(cases[cs].kind, j == 1 ? D : I, j == 1 ? I : D, 1);
                size_t ns = wmat_scale_count(h.m.rows, h.m.cols, 1, 32);
                for (size_t b = 0; e == 0 && b < ns; b += 5) {
                    h.scale[b] = big;
                    if (cases[cs].kind == WQ_FP8) { /* codes of the two least exponents there (see above) */
                        int64_t ncb = (h.m.cols + 31) / 32, row = (int64_t)b / ncb, c0 = (int64_t)b % ncb * 32;
                        for (int64_t c = c0; c < c0 + 32 && c < h.m.cols; c++) h.data[row * h.m.cols + c] &= 0x8F;
                    }
                }
                wmat_rows(&h.m, 0, h.m.rows, h.dense);
                w[e][j] = bind_weight(h);
            }
            ex[e] = (bk_expert_t){w[e][0].g, w[e][1].g, w[e][2].g};
        }
        float *x = t_rand_vec((size_t)(M * D), 2.0f);
        double *ref = xmalloc((size_t)(M * D) * 8);
        float *reff = xmalloc((size_t)(M * D) * 4);
        pair_t tx = putf(x, M, D), o = out2(BK_F32, M, D), o1 = out2(BK_F32, M, D);
        for (int lim = 0; lim < 2; lim++) {
            float limit = lim ? 0.7f : 0.0f;
            poison(o.g), poison(o1.g);
            gpu->moe(gpu, o.g, tx.g, ti.g, tw.g, ex, E, NULL, NULL, limit);
            for (int r = 0; r < M; r++)
                gpu->moe(gpu, bk_rows(o1.g, r, 1), bk_rows(tx.g, r, 1), bk_rows(ti.g, r, 1), bk_rows(tw.g, r, 1), ex, E, NULL, NULL,
                         limit);
            float *g = t_download(gpu, o.g), *g1 = t_download(gpu, o1.g);
            memset(ref, 0, (size_t)(M * D) * 8);
            double worst = 0;
            int same = 0;
            for (int r = 0; r < M; r++) {
                for (int s = 0; s < K; s++)
                    expert_ref(w[idx[r * K + s]], round ? ACT_BF16 : ACT_F32, x + r * D, D, I, wt[r * K + s], limit, ref + r * D);
                for (int d = 0; d < D; d++) reff[r * D + d] = (float)ref[r * D + d];
                worst = fmax(worst, t_max_err(g + r * D, reff + r * D, (size_t)D));
                same += !memcmp(g + r * D, g1 + r * D, (size_t)D * 4);
            }
            CHECKF(worst <= cases[cs].tol, "moe_tcs kind %d D %d I %d precision %d limit %g: error %.3g", cases[cs].kind, D, I,
                   cases[cs].prec, limit, worst);
            CHECKF(same == M, "moe_tcs kind %d D %d I %d precision %d: %d of %d rows alone differ from batched",
                   cases[cs].kind, D, I, cases[cs].prec, M - same, M);
            printf("  moe_tcs kind %d D %d I %d precision %d limit %g: worst row %.2e\n", cases[cs].kind, D, I, cases[cs].prec,
                   limit, worst);
            free(g), free(g1);
        }
        for (int e = 0; e < E; e++)
            for (int j = 0; j < 3; j++) free_weight(&w[e][j]);
        free2(&tx), free2(&o), free2(&o1);
        free(x), free(ref), free(reff);
    }
    backend_cuda_precision(gpu, CUDA_BF16X3);
    free2(&ti), free2(&tw);
    free(wt);
}

/* ---- memory ops, graphs ------------------------------------------------------------------------------ */
static void test_views_and_copy(void) {
    float *a = t_rand_vec(6 * 10, 1.0f);
    pair_t t = putf(a, 6, 10), u = out2(BK_F32, 3, 4);
    gpu->copy(gpu, u.g, bk_cols(bk_rows(t.g, 2, 3), 5, 4));
    cpu->copy(cpu, u.c, bk_cols(bk_rows(t.c, 2, 3), 5, 4));
    compare(u, 0, "copy of a view");
    float part[2 * 3] = {1, 2, 3, 4, 5, 6};
    gpu->upload(gpu, bk_cols(bk_rows(t.g, 1, 2), 4, 3), part);
    cpu->upload(cpu, bk_cols(bk_rows(t.c, 1, 2), 4, 3), part);
    compare(t, 0, "upload into a view");
    bk_tensor_t z = gpu->alloc(gpu, BK_F32, 5, 7);
    float *zv = t_download(gpu, z);
    int nz = 0;
    for (int i = 0; i < 35; i++) nz += zv[i] != 0.0f;
    CHECK_EQ(nz, 0); /* alloc zero-fills, also when it reuses a cached block */
    gpu->release(gpu, &z);
    free2(&t), free2(&u);
    free(a), free(zv);
}

/* Ops on a branch alongside ops on the main line give the bits of the same ops in issue order,
 * ten times over: split-K matmuls on both (both streams' counters busy at once), scratch and a
 * tensor released inside the branch; a block the branch released is not handed to the main
 * line before the join. */
/* o: the branch's norm and output, the main line's two outputs */
static void branch_round(const weight_t *w, bk_tensor_t x, const bk_tensor_t *o, bool branch) {
    int64_t m = x.rows, D = x.cols;
    if (branch) gpu->branch_begin(gpu);
    gpu->matmul(gpu, o[0], x, w[0].g, 0);
    gpu->rmsnorm(gpu, o[0], o[0], NULL, 1e-6f);
    bk_tensor_t t = gpu->alloc(gpu, BK_F32, m, D);
    void *released = t.ptr;
    gpu->matmul(gpu, t, o[0], w[2].g, 0);
    gpu->copy(gpu, o[1], t);
    gpu->release(gpu, &t);
    if (branch) gpu->branch_end(gpu);
    bk_tensor_t u = gpu->alloc(gpu, BK_F32, m, D);
    if (branch) CHECKF(u.ptr != released, "the branch's released block reused before the join");
    gpu->matmul(gpu, o[2], x, w[1].g, 0);
    gpu->matmul(gpu, u, o[2], w[2].g, 0);
    gpu->copy(gpu, o[3], u);
    gpu->release(gpu, &u);
    if (branch) gpu->branch_join(gpu);
}

static void test_branch(void) {
    enum { D = 7168, N = 1024 };
    weight_t w[3] = {make_weight(WQ_FP8, N, D, 32), make_weight(WQ_FP8, N, D, 32), make_weight(WQ_FP8, D, N, 32)};
    for (int m = 1; m <= 3; m += 2) {
        float *x = t_rand_vec((size_t)(m * D), 1.0f);
        bk_tensor_t tx = gpu->alloc(gpu, BK_F32, m, D);
        gpu->upload(gpu, tx, x);
        bk_tensor_t ref[4], got[4];
        for (int k = 0; k < 4; k++) {
            int64_t cols = k % 2 ? D : N;
            ref[k] = gpu->alloc(gpu, BK_F32, m, cols), got[k] = gpu->alloc(gpu, BK_F32, m, cols);
        }
        branch_round(w, tx, ref, false);
        float *want[4];
        for (int k = 0; k < 4; k++) want[k] = t_download(gpu, ref[k]);
        int differ = 0;
        for (int rep = 0; rep < 10; rep++) {
            for (int k = 0; k < 4; k++) poison(got[k]);
            branch_round(w, tx, got, true);
            for (int k = 0; k < 4; k++) {
                float *g = t_download(gpu, got[k]);
                differ += memcmp(g, want[k], (size_t)(m * got[k].cols) * 4) != 0;
                free(g);
            }
        }
        CHECKF(differ == 0, "%d rows: %d outputs of 40 differ from issue order", m, differ);
        for (int k = 0; k < 4; k++) free(want[k]), gpu->release(gpu, &ref[k]), gpu->release(gpu, &got[k]);
        gpu->release(gpu, &tx);
        free(x);
    }
    for (int i = 0; i < 3; i++) free_weight(&w[i]);
}

/* A kernel right after the join sees what the branch wrote although the branch is still
 * running then (a chain of matmuls on the branch, one small kernel on the main line, whose
 * successor may start early under programmatic dependent launch): the join is a whole
 * dependency, eleven times over. */
static void test_branch_join(void) {
    enum { D = 7168, N = 1024, CHAIN = 8 };
    weight_t up = make_weight(WQ_FP8, N, D, 32), down = make_weight(WQ_FP8, D, N, 32);
    float *x = t_rand_vec(D, 1.0f);
    bk_tensor_t tx = gpu->alloc(gpu, BK_F32, 1, D), a = gpu->alloc(gpu, BK_F32, 1, N), y = gpu->alloc(gpu, BK_F32, 1, D);
    bk_tensor_t r = gpu->alloc(gpu, BK_F32, 1, D), z = gpu->alloc(gpu, BK_F32, 1, 64);
    gpu->upload(gpu, tx, x);
    float *want = NULL;
    int stale = 0, finite = 1;
    for (int rep = 0; rep <= 10; rep++) {
        bool branch = rep > 0; /* rep 0: the same ops in issue order */
        poison(y), poison(r);
        if (branch) gpu->branch_begin(gpu);
        bk_tensor_t in = tx;
        for (int i = 0; i < CHAIN; i++) {
            gpu->matmul(gpu, a, in, up.g, 0);
            gpu->matmul(gpu, y, a, down.g, 0);
            gpu->rmsnorm(gpu, y, y, NULL, 1e-6f);
            in = y;
        }
        if (branch) gpu->branch_end(gpu);
        gpu->rmsnorm(gpu, z, z, NULL, 1e-6f); /* the main line's kernel before the join */
        if (branch) gpu->branch_join(gpu);
        gpu->copy(gpu, r, y);
        float *g = t_download(gpu, r);
        if (!want) {
            want = g;
            for (int i = 0; i < D; i++) finite &= isfinite(want[i]) != 0;
            continue;
        }
        stale += memcmp(g, want, (size_t)D * 4) != 0;
        free(g);
    }
    CHECK(finite);
    CHECKF(stale == 0, "%d of 10 reads after the join differ from issue order", stale);
    free(want), free(x);
    gpu->release(gpu, &tx), gpu->release(gpu, &a), gpu->release(gpu, &y), gpu->release(gpu, &r), gpu->release(gpu, &z);
    free_weight(&up), free_weight(&down);
}

/* A few ops and a download captured as a graph, twice with new inputs (the second replays by
 * update): the same numbers as eager execution. */
static void test_graph(void) {
    weight_t w = make_weight(WQ_FP8, 96, 128, 32);
    float *norm = t_rand_vec(96, 1.0f);
    pair_t tn = putf(norm, 1, 96);
    for (int round = 0; round < 3; round++) {
        float *x = t_rand_vec(4 * 128, 1.0f), eager[4 * 96], graph[4 * 96];
        for (int mode = 0; mode < 2; mode++) {
            if (mode) backend_cuda_graph_begin(gpu);
            bk_tensor_t tx = gpu->alloc(gpu, BK_F32, 4, 128), o = gpu->alloc(gpu, BK_F32, 4, 96);
            gpu->upload(gpu, tx, x);
            gpu->matmul(gpu, o, tx, w.g, 0);
            gpu->rmsnorm(gpu, o, o, &tn.g, 1e-6f);
            gpu->download(gpu, mode ? graph : eager, o);
            gpu->release(gpu, &tx), gpu->release(gpu, &o);
            if (mode) backend_cuda_graph_end(gpu);
        }
        CHECKF(!memcmp(eager, graph, sizeof eager), "graph round %d differs from eager execution", round);
        free(x);
    }
    free2(&tn);
    free(norm);
    free_weight(&w);
}

/* ---- pick ---------------------------------------------------------------------------------------- */
/* Row r's log-probabilities as the host's: the same tokens, values within 1e-6 (the device sums
 * the exponentials in another grouping). */
static bool same_logprobs(const frame_logprob_t *g, const frame_logprob_t *c) {
    if (g->n_top != c->n_top || memcmp(g->top_ids, c->top_ids, c->n_top * sizeof *c->top_ids)) return false;
    for (uint32_t i = 0; i <= c->n_top; i++) {
        float a = i < c->n_top ? g->top_logprobs[i] : g->logprob, b = i < c->n_top ? c->top_logprobs[i] : c->logprob;
        if (isnan(a) != isnan(b) || (!isnan(b) && fabsf(a - b) > 1e-6f * fmaxf(1.0f, fabsf(b)))) return false;
    }
    return true;
}

/* One batch of rows with every kind of request: greedy (ties, NaN, masks, nothing allowed),
 * temperature with and without min-p and masks (a row of -inf and NaN too), top-k, top-p and
 * both with min-p (the ranked rows; with ties and NaN; top-k above the allowed count walks in id
 * order), log-probabilities with every kind. The GPU must choose what the host sampler chooses
 * from the same logits, row for row, and report the same log-probabilities. Row r is of kind
 * (first + r) % 16 (a row alone: the ranked rows' one-row sort). */
static void pick_case(int64_t V, int rows, int first) {
    float *l = xmalloc((size_t)(rows * V) * sizeof *l);
    int64_t words = (V + 31) / 32;
    uint32_t *masks = xcalloc((size_t)(rows * words), sizeof *masks);
    sampler_params_t *sp = xcalloc((size_t)rows, sizeof *sp);
    bk_pick_t *pg = xcalloc((size_t)rows, sizeof *pg), *pc = xcalloc((size_t)rows, sizeof *pc);
    uint32_t *tg = xcalloc((size_t)rows, 4), *tc = xcalloc((size_t)rows, 4);
    frame_logprob_t *lg = xcalloc((size_t)rows, sizeof *lg), *lc = xcalloc((size_t)rows, sizeof *lc);
    for (int r = 0; r < rows; r++) {
        float *x = l + (size_t)r * (size_t)V;
        int kind = (first + r) % 16, masked = (r / 16) % 3; /* 0 none, 1 sparse, 2 dense */
        for (int64_t v = 0; v < V; v++) x[v] = 4.0f * t_unif();
        if (kind == 1 || kind == 12) for (int64_t v = 0; v < V; v++) x[v] = (float)(t_rnd() % 4); /* ties */
        if (kind == 2 || kind == 13) for (int64_t v = 0; v < V; v += 3) x[v] = NAN;
        if (kind == 7) for (int64_t v = 0; v < V; v++) x[v] = v % 2 ? -INFINITY : NAN;
        if (kind == 6 && (r / 16) % 2) x[V / 2] = INFINITY; /* no finite z under min-p: none kept */
        if ((kind == 10 || kind == 14) && (r / 16) % 2) /* peaked: the nucleus among a few tokens (top-p from first ranks) */
            for (int j = 0; j < 20; j++) x[t_rnd() % V] += 15.0f;
        uint32_t *m = masks + (size_t)r * (size_t)words;
        for (int64_t v = 0; v < V; v++)
            if (masked == 2 ? t_rnd() % 4 != 0 : t_rnd() % 997 == 0) m[v >> 5] |= 1u << (v & 31);
        sampler_params_t *p = &sp[r];
        *p = (sampler_params_t){.temperature = 1.0, .top_p = 1.0, .seed = t_rnd()};
        switch (kind) {
        case 0: case 1: case 2: p->temperature = 0; break;
        case 3: p->temperature = 0.3; break;
        case 4: p->temperature = 0.7, p->min_p = 0.05; break;
        case 5: p->temperature = 1.5; break;
        case 6: p->temperature = 1.0, p->min_p = 0.5; break;
        case 7: p->top_p = (r / 16) % 2 ? 0.9 : 1.0, p->min_p = (r / 16) % 3 ? 0.0 : 0.2; break; /* ranked: handed back to the host */
        case 8: p->top_k = 1; break; /* greedy */
        case 9: p->top_k = 7; break;
        case 10: p->top_p = 0.8; break;
        case 11: p->logprobs = true, p->top_logprobs = 3; break;
        case 12: p->temperature = 0.7, p->top_k = 50, p->min_p = 0.02; break;
        case 13: p->temperature = 0.5, p->top_k = 1000, p->top_p = 0.95, p->logprobs = true, p->top_logprobs = 5; break;
        case 14: p->temperature = 1.2, p->top_p = 0.5, p->min_p = 0.3; break;
        case 15: p->temperature = 0, p->logprobs = true, p->top_logprobs = FRAME_MAX_TOP; break;
        }
        const uint32_t *mask = masked ? m : NULL;
        if (r == 5) memset(m, 0, (size_t)words * 4), mask = m; /* nothing allowed */
        int64_t pos = (int64_t)(t_rnd() % 100000);
        pg[r] = (bk_pick_t){p, pos, mask, &tg[r], &lg[r]};
        pc[r] = (bk_pick_t){p, pos, mask, &tc[r], &lc[r]};
    }
    pair_t t = putf(l, rows, V);
    sampler_t *sg = sampler_new(V), *sc = sampler_new(V);
    gpu->pick(gpu, t.g, pg, rows, sg);
    cpu->pick(cpu, t.c, pc, rows, sc);
    int same = 0, lp_same = 0, n_lp = 0, sampled = 0, ranked = 0;
    for (int r = 0; r < rows; r++) {
        same += tg[r] == tc[r];
        if (tg[r] != tc[r]) printf("# V %lld row %d (kind %d): gpu %u, host %u\n", (long long)V, r, (first + r) % 16, tg[r], tc[r]);
        sampled += sp[r].temperature > 0 && sp[r].top_k != 1 && tc[r] != SAMPLER_NONE;
        ranked += sp[r].temperature > 0 && (sp[r].top_k > 1 || sp[r].top_p < 1) && tc[r] != SAMPLER_NONE;
        if (sp[r].logprobs) {
            n_lp++, lp_same += same_logprobs(&lg[r], &lc[r]);
            if (!same_logprobs(&lg[r], &lc[r])) printf("# V %lld row %d: log-probabilities differ\n", (long long)V, r);
        }
    }
    CHECKF(same == rows, "V %lld: %d of %d rows pick what the host sampler picks", (long long)V, same, rows);
    CHECK_EQ(lp_same, n_lp);
    if (rows > 5) /* the batch holds every kind (row 5 allows nothing) */
        CHECK(tc[5] == SAMPLER_NONE && sampled > rows / 3 && ranked >= rows / 8);
    else
        CHECK_EQ(ranked, rows); /* the rows alone are ranked ones */
    free2(&t);
    sampler_free(sg), sampler_free(sc);
    free(l), free(masks), free(sp), free(pg), free(pc), free(tg), free(tc), free(lg), free(lc);
}

static void test_pick(void) {
    pick_case(129280, 96, 0);
    pick_case(1000, 240, 0); /* a vocabulary smaller than the block's threads times two */
    pick_case(33, 40, 0);
    /* one ranked row alone (a sort of one row's keys): top-k 1,000, flat top-p (past its first ranks) */
    pick_case(129280, 1, 13);
    pick_case(129280, 1, 10);
    pick_case(1000, 1, 13);
}

/* The seed of one test: the run's seed mixed with the test's name, so that a test draws the
 * same inputs whether the run takes every test or only it. */
static uint64_t test_seed(uint64_t run, const char *name) {
    uint64_t h = 1469598103934665603u;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211u;
    return (run ^ h) ? run ^ h : 1;
}

/* test_backend_cuda [NAME...]: every test, or the named ones. */
int main(int argc, char **argv) {
    const char *seed = getenv("DI_TEST_SEED");
    uint64_t s = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) * 2654435761u + 1;
    printf("seed %llu (DI_TEST_SEED repeats it, also for a test run alone)\n", (unsigned long long)s);
    char err[256];
    gpu = backend_cuda_create(0, err, sizeof err);
    struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"test_matmul", test_matmul}, {"test_matmul_tcs", test_matmul_tcs}, {"test_matmul_narrow", test_matmul_narrow}, {"test_matmul_f32_scales", test_matmul_f32_scales}, {"test_matmul_grouped", test_matmul_grouped},
        {"test_matmul_deterministic", test_matmul_deterministic}, {"test_matmul_walks", test_matmul_walks},
        {"test_matmul_batch_invariance", test_matmul_batch_invariance}, {"test_gather", test_gather},
        {"test_rmsnorm", test_rmsnorm}, {"test_rope", test_rope}, {"test_qat", test_qat}, {"test_hc", test_hc},
        {"test_hc_pre", test_hc_pre},
        {"test_engram_gate", test_engram_gate}, {"test_group_pool", test_group_pool}, {"test_attention", test_attention},
        {"test_indexer", test_indexer}, {"test_router", test_router}, {"test_gate_router", test_gate_router}, {"test_batched_forms", test_batched_forms},
        {"test_tc_spans", test_tc_spans}, {"test_rope_qat", test_rope_qat},
        {"test_moe", test_moe}, {"test_moe_batch_invariance", test_moe_batch_invariance}, {"test_tc_forms", test_tc_forms}, {"test_moe_expand", test_moe_expand}, {"test_matmul_expand", test_matmul_expand},
        {"test_moe_tcs", test_moe_tcs},
        {"test_tc_batch_invariance", test_tc_batch_invariance},
        {"test_views_and_copy", test_views_and_copy}, {"test_branch", test_branch},
        {"test_branch_join", test_branch_join}, {"test_graph", test_graph},
        {"test_pick", test_pick},
    };
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < DI_ARRAY_LEN(cases) && strcmp(argv[a], cases[i].name)) i++;
        if (i == DI_ARRAY_LEN(cases)) {
            fprintf(stderr, "test_backend_cuda: no test named '%s'\n", argv[a]);
            return 2;
        }
    }
    cpu = backend_cpu_create(2);
    for (size_t i = 0; i < DI_ARRAY_LEN(cases); i++) {
        bool wanted = argc == 1;
        for (int a = 1; a < argc; a++) wanted = wanted || !strcmp(argv[a], cases[i].name);
        if (!wanted) continue;
        t_seed(test_seed(s, cases[i].name));
        if (gpu) t_run(cases[i].name, cases[i].fn);
        else t_skip(cases[i].name, err);
    }
    if (gpu) gpu->destroy(gpu);
    cpu->destroy(cpu);
    return t_finish();
}
