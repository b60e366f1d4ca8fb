/* Numbers for the op and model tests: seeded random inputs, random stored weights, and the
 * error measures the comparisons use. */
#ifndef DI_TESTNUM_H
#define DI_TESTNUM_H

#include "backend.h"
#include "pagestore.h"

#include <stddef.h>
#include <stdint.h>

/* xorshift64: t_seed (non-zero) makes a run repeatable; without it every run is the same. */
void t_seed(uint64_t seed);
uint64_t t_rnd(void);
float t_unif(void); /* uniform on [-1, 1) */
float *t_rand_vec(size_t n, float scale);

/* A stored weight with random contents (no NaN codes; FP8/FP4 block scales 2^-9 .. 2^-2), its
 * block rows as given (32: dense FP8; 1: FP8 rows as Engram's, and every other kind), and its
 * values dequantized for references. */
typedef struct {
    wmat_t m;
    uint8_t *data, *scale;
    float *dense;
} t_weight_t;

t_weight_t t_weight_random(wq_kind_t kind, int64_t rows, int64_t cols, int block_rows);
void t_weight_free(t_weight_t *w);

/* A tensor's values, downloaded into a new array. */
float *t_download(backend_t *b, bk_tensor_t t);

/* A paged store (pagestore.h) holding host's rows x cols, its pages out of order (the pool's
 * free pages shuffled before it takes them) and every row past `rows` NaN, so that an op that
 * reads it as contiguous memory or past its rows goes wrong. */
typedef struct {
    pagepool_t *pp;
    pagestore_t s;
    bk_paged_t v; /* the view of all its rows */
} t_paged_t;
t_paged_t t_paged(backend_t *b, const float *host, int64_t rows, int64_t cols);
void t_paged_free(t_paged_t *p);

/* max |a - b| / max |b|; a NaN where the other has none counts as infinitely wrong. */
double t_max_err(const float *a, const float *b, size_t n);
/* |a - b| / |b| over n values (relative L2); a NaN in a counts as infinitely wrong. */
double t_rel_l2(const float *a, const float *b, size_t n);
/* The index of the largest value (the first of equals). */
int t_argmax(const float *a, int n);

#endif
