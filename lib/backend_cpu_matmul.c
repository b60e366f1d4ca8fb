/* CPU matmul against stored weights: weight rows are dequantized tile by tile into a worker's
 * scratch and dotted with every input row; each output is one fixed-order dot product, so the
 * result does not depend on tiling, batching or threads. */
#include "backend_cpu_internal.h"
#include "util.h"

#include <string.h>

typedef float v8 __attribute__((vector_size(32)));

float cpu_dot(const float *a, const float *b, int64_t n) {
    v8 s0 = {0}, s1 = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v8 a0, b0, a1, b1;
        memcpy(&a0, a + i, 32);
        memcpy(&b0, b + i, 32);
        memcpy(&a1, a + i + 8, 32);
        memcpy(&b1, b + i + 8, 32);
        s0 += a0 * b0;
        s1 += a1 * b1;
    }
    s0 += s1;
    float t = ((s0[0] + s0[4]) + (s0[1] + s0[5])) + ((s0[2] + s0[6]) + (s0[3] + s0[7]));
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return t + tail;
}

void cpu_dot4(const float *x0, const float *x1, const float *x2, const float *x3, const float *w, int64_t n, float *out,
              int64_t ldo) {
    v8 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, c0 = {0}, c1 = {0}, d0 = {0}, d1 = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v8 w0, w1, t;
        memcpy(&w0, w + i, 32);
        memcpy(&w1, w + i + 8, 32);
        memcpy(&t, x0 + i, 32), a0 += t * w0;
        memcpy(&t, x0 + i + 8, 32), a1 += t * w1;
        memcpy(&t, x1 + i, 32), b0 += t * w0;
        memcpy(&t, x1 + i + 8, 32), b1 += t * w1;
        memcpy(&t, x2 + i, 32), c0 += t * w0;
        memcpy(&t, x2 + i + 8, 32), c1 += t * w1;
        memcpy(&t, x3 + i, 32), d0 += t * w0;
        memcpy(&t, x3 + i + 8, 32), d1 += t * w1;
    }
    v8 s[4] = {a0 + a1, b0 + b1, c0 + c1, d0 + d1};
    const float *xs[4] = {x0, x1, x2, x3};
    for (int k = 0; k < 4; k++) {
        float t = ((s[k][0] + s[k][4]) + (s[k][1] + s[k][5])) + ((s[k][2] + s[k][6]) + (s[k][3] + s[k][7]));
        float tail = 0.0f;
        for (int64_t j = i; j < n; j++) tail += xs[k][j] * w[j];
        out[k * ldo] = t + tail;
    }
}

#define ROW_BLOCK 64 /* input rows per task: parallelism for short weights and long inputs */

typedef struct {
    cpu_t *c;
    float *out;
    int64_t ldo;
    const float *x;
    int64_t ldx, m;
    const wmat_t *w;
    int64_t row0, n_out, tile, row_blocks;
} mm_job_t;

static void mm_tasks(void *p, int64_t k0, int64_t k1, int worker) {
    mm_job_t *j = p;
    int64_t cols = j->w->cols, have = -1;
    float *tile = cpu_scratch(j->c, worker, SCRATCH_MATMUL, (size_t)(j->tile * cols));
    for (int64_t k = k0; k < k1; k++) {
        int64_t t = k / j->row_blocks, o0 = t * j->tile, rb = k % j->row_blocks;
        int64_t no = j->n_out - o0 < j->tile ? j->n_out - o0 : j->tile;
        if (t != have) {
            wmat_rows(j->w, j->row0 + o0, no, tile);
            have = t;
        }
        int64_t r1 = (rb + 1) * ROW_BLOCK < j->m ? (rb + 1) * ROW_BLOCK : j->m;
        int64_t r = rb * ROW_BLOCK;
        for (; r + 4 <= r1; r += 4) {
            const float *x0 = j->x + r * j->ldx;
            for (int64_t o = 0; o < no; o++)
                cpu_dot4(x0, x0 + j->ldx, x0 + 2 * j->ldx, x0 + 3 * j->ldx, tile + o * cols, cols, j->out + r * j->ldo + o0 + o, j->ldo);
        }
        for (; r < r1; r++) {
            const float *xr = j->x + r * j->ldx;
            float *orow = j->out + r * j->ldo + o0;
            for (int64_t o = 0; o < no; o++) orow[o] = cpu_dot(xr, tile + o * cols, cols);
        }
    }
}

void cpu_matmul(cpu_t *c, float *out, int64_t ldo, const float *x, int64_t ldx, int64_t m, const wmat_t *w,
                int64_t row0, int64_t n_out) {
    if (m <= 0 || n_out <= 0) return;
    int64_t tile = 65536 / (w->cols > 0 ? w->cols : 1); /* about 256 KiB of fp32 per tile */
    tile = tile < 4 ? 4 : tile > 64 ? 64 : tile;
    mm_job_t j = {c, out, ldo, x, ldx, m, w, row0, n_out, tile, (m + ROW_BLOCK - 1) / ROW_BLOCK};
    int64_t tiles = (n_out + tile - 1) / tile;
    tp_for(c->tp, tiles * j.row_blocks, cpu_grain((m < ROW_BLOCK ? m : ROW_BLOCK) * tile * w->cols), mm_tasks, &j);
}

void cpu_matmul_op(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int64_t row0) {
    cpu_matmul(cpu_of(bk), out.ptr, out.ld, x.ptr, x.ld, x.rows, &w->m, row0, out.cols);
}

void cpu_matmul_grouped(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int groups) {
    int64_t ng = groups > 0 ? out.cols / groups : 0, kg = groups > 0 ? x.cols / groups : 0;
    if (groups <= 0 || ng * groups != out.cols || kg * groups != x.cols || kg != w->m.cols || ng * groups > w->m.rows)
        die("CPU backend: grouped matmul of %lld -> %lld columns in %d groups against a %lld x %lld weight",
            (long long)x.cols, (long long)out.cols, groups, (long long)w->m.rows, (long long)w->m.cols);
    for (int g = 0; g < groups; g++) cpu_matmul_op(bk, bk_cols(out, g * ng, ng), bk_cols(x, g * kg, kg), w, g * ng);
}

typedef struct {
    bk_tensor_t out, idx;
    const wmat_t *w;
} gather_job_t;

static void gather_rows(void *p, int64_t r0, int64_t r1, int worker) {
    (void)worker;
    gather_job_t *j = p;
    int64_t cols = j->w->cols;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t k = 0; k < j->idx.cols; k++) {
            int32_t id = i32_at(j->idx, r)[k];
            float *dst = f32_at(j->out, r) + k * cols;
            if (id >= 0 && id < j->w->rows) wmat_rows(j->w, id, 1, dst);
            else memset(dst, 0, (size_t)cols * 4);
        }
}

void cpu_gather(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx) {
    gather_job_t j = {out, idx, &table->m};
    tp_for(cpu_of(bk)->tp, out.rows, cpu_grain(out.cols), gather_rows, &j);
}
