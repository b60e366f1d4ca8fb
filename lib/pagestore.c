#include "pagestore.h"
#include "util.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define PTR_INTS ((int64_t)(sizeof(void *) / 4)) /* a page address in the table's int32 elements */
#define CHUNK_MIN 8                              /* pages of the first allocation */
#define CHUNK_MAX 512                            /* and of the largest: the pool grows geometrically up to it */

struct pagepool {
    backend_t *bk;
    int64_t cols;
    bk_tensor_t *chunks; /* the allocations pages are carved from */
    int n_chunks;
    void **free_pages;   /* a stack: the page given back last is taken first */
    int64_t n_free, cap_free, carved;
};

pagepool_t *pagepool_new(backend_t *bk, int64_t cols) {
    if (cols < 1) die("pagepool: rows of %lld columns", (long long)cols);
    pagepool_t *pp = xcalloc(1, sizeof *pp);
    pp->bk = bk;
    pp->cols = cols;
    return pp;
}

void pagepool_free(pagepool_t *pp) {
    if (!pp) return;
    if (pp->n_free != pp->carved) die("pagepool: freed with %lld pages still in stores", (long long)(pp->carved - pp->n_free));
    for (int i = 0; i < pp->n_chunks; i++) pp->bk->release(pp->bk, &pp->chunks[i]);
    free(pp->chunks);
    free(pp->free_pages);
    free(pp);
}

int64_t pagepool_in_use(const pagepool_t *pp) { return pp->carved - pp->n_free; }
int64_t pagepool_pages(const pagepool_t *pp) { return pp->carved; }
int64_t pagepool_bytes(const pagepool_t *pp) { return pp ? pp->carved * BK_PAGE_ROWS * pp->cols * 4 : 0; }

static void give(pagepool_t *pp, void *page) {
    if (pp->n_free == pp->cap_free) {
        pp->cap_free = pp->cap_free ? 2 * pp->cap_free : 64;
        pp->free_pages = xrealloc(pp->free_pages, (size_t)pp->cap_free * sizeof *pp->free_pages);
    }
    pp->free_pages[pp->n_free++] = page;
}

static void *take(pagepool_t *pp) {
    if (!pp->n_free) { /* a new allocation, its pages stacked so that the first is taken first */
        int64_t n = pp->carved < CHUNK_MIN ? CHUNK_MIN : pp->carved > CHUNK_MAX ? CHUNK_MAX : pp->carved;
        bk_tensor_t chunk = pp->bk->alloc(pp->bk, BK_F32, n * BK_PAGE_ROWS, pp->cols);
        if ((uintptr_t)chunk.ptr % 16) die("pagepool: backend memory at %p is not 16-byte aligned", chunk.ptr);
        pp->chunks = xrealloc(pp->chunks, (size_t)(pp->n_chunks + 1) * sizeof *pp->chunks);
        pp->chunks[pp->n_chunks++] = chunk;
        for (int64_t k = n - 1; k >= 0; k--) give(pp, bk_rows(chunk, k * BK_PAGE_ROWS, BK_PAGE_ROWS).ptr);
        pp->carved += n;
    }
    return pp->free_pages[--pp->n_free];
}

pagestore_t pagestore_new(pagepool_t *pp) { return (pagestore_t){.pp = pp}; }

void pagestore_reserve(pagestore_t *s, int64_t rows) {
    int64_t need = (rows + BK_PAGE_ROWS - 1) / BK_PAGE_ROWS;
    if (need <= s->n_pages) return;
    if (need > s->cap) {
        int64_t cap = s->cap ? s->cap : 4;
        while (cap < need) cap *= 2;
        s->pages = xrealloc(s->pages, (size_t)cap * sizeof *s->pages);
        s->cap = cap;
    }
    for (int64_t k = s->n_pages; k < need; k++) s->pages[k] = take(s->pp);
    s->n_pages = need;
}

void pagestore_sync(pagestore_t *s) {
    if (s->synced == s->n_pages) return;
    backend_t *bk = s->pp->bk;
    if (s->n_pages > s->table_cap) { /* a larger table, all of it uploaded */
        if (s->table_cap) bk->release(bk, &s->table);
        s->table = bk->alloc(bk, BK_I32, 1, s->cap * PTR_INTS);
        s->table_cap = s->cap;
        s->synced = 0;
    }
    bk->upload(bk, bk_cols(s->table, s->synced * PTR_INTS, (s->n_pages - s->synced) * PTR_INTS), &s->pages[s->synced]);
    s->synced = s->n_pages;
}

void pagestore_release(pagestore_t *s) {
    for (int64_t k = s->n_pages; k-- > 0;) give(s->pp, s->pages[k]);
    if (s->table_cap) s->pp->bk->release(s->pp->bk, &s->table);
    free(s->pages);
    *s = pagestore_new(s->pp);
}

bk_paged_t pagestore_view(const pagestore_t *s, int64_t rows) {
    if (rows > s->synced * BK_PAGE_ROWS)
        die("pagestore: a view of %lld rows with %lld pages in the backend's table", (long long)rows, (long long)s->synced);
    return (bk_paged_t){s->synced ? s->table.ptr : NULL, s->pages, rows, s->pp->cols};
}

int64_t pagestore_run(const pagestore_t *s, int64_t j, int64_t n, bk_tensor_t *view) {
    if (j + n > s->n_pages * BK_PAGE_ROWS)
        die("pagestore: rows %lld..%lld past its %lld pages", (long long)j, (long long)(j + n), (long long)s->n_pages);
    return bk_paged_run((bk_paged_t){NULL, s->pages, j + n, s->pp->cols}, j, n, view);
}

/* Rows [j0, j0 + n) to the store (up) or from it, a page's run at a time. */
static void transfer(const pagestore_t *s, int64_t j0, int64_t n, float *host, bool up) {
    backend_t *bk = s->pp->bk;
    bk_tensor_t v;
    for (int64_t j = j0; j < j0 + n; j += v.rows) {
        pagestore_run(s, j, j0 + n - j, &v);
        float *h = host + (j - j0) * v.cols;
        if (up) bk->upload(bk, v, h);
        else bk->download(bk, h, v);
    }
}

void pagestore_upload(const pagestore_t *s, int64_t j0, int64_t n, const float *host) { transfer(s, j0, n, (float *)host, true); }
void pagestore_download(const pagestore_t *s, int64_t j0, int64_t n, float *host) { transfer(s, j0, n, host, false); }
