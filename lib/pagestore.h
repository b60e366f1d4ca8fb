/* Paged row stores for the per-sequence state (pool entries, indexer keys): a pagepool_t
 * hands out pages of BK_PAGE_ROWS x cols fp32 rows, carved from larger backend allocations
 * that are never moved, and takes them back when a sequence ends; a pagestore_t is one
 * sequence-layer's store, its page table in host memory and in backend memory for the ops
 * (backend.h's bk_paged_t). Growing a store adds pages and later writes the new table
 * entries; nothing already stored is copied, and a finished sequence's pages serve the next one. */
#ifndef DI_PAGESTORE_H
#define DI_PAGESTORE_H

#include "backend.h"

typedef struct pagepool pagepool_t;

pagepool_t *pagepool_new(backend_t *bk, int64_t cols);
/* Releases the pool's memory; every store taken from it must have been released. */
void pagepool_free(pagepool_t *pp);
/* Pages handed out and not given back (tests, statistics). */
int64_t pagepool_in_use(const pagepool_t *pp);
/* Pages carved so far (in use or free), and their bytes (the pool's memory: it never shrinks). */
int64_t pagepool_pages(const pagepool_t *pp);
int64_t pagepool_bytes(const pagepool_t *pp);

typedef struct {
    pagepool_t *pp;
    void **pages;          /* the table, host copy */
    int64_t n_pages, cap;
    bk_tensor_t table;     /* the table, backend copy: BK_I32, sizeof(void *) / 4 ints an address */
    int64_t synced, table_cap; /* its first `synced` addresses are current; room for table_cap */
} pagestore_t;

/* An empty store drawing from pp. */
pagestore_t pagestore_new(pagepool_t *pp);
/* Pages for rows [0, rows): host work only (a branch may do it, backend.h), their rows
 * reachable at once through pagestore_run, pagestore_upload and pagestore_download; the ops
 * see them after pagestore_sync. */
void pagestore_reserve(pagestore_t *s, int64_t rows);
/* The backend's table brought up to date (an upload: not inside a branch). */
void pagestore_sync(pagestore_t *s);
/* Gives every page back; the store is empty again. */
void pagestore_release(pagestore_t *s);
/* The ops' view of rows [0, rows) (synced pages). */
bk_paged_t pagestore_view(const pagestore_t *s, int64_t rows);
/* Rows [j, j + len) as a tensor view, len = n cut at the end of j's page (reserved); returns len. */
int64_t pagestore_run(const pagestore_t *s, int64_t j, int64_t n, bk_tensor_t *view);

/* Host <-> store rows [j0, j0 + n) (reserved), host rows packed (cols floats each). */
void pagestore_upload(const pagestore_t *s, int64_t j0, int64_t n, const float *host);
void pagestore_download(const pagestore_t *s, int64_t j0, int64_t n, float *host);

#endif
