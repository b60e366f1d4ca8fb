/* Paged row stores (lib/pagestore.h) on the CPU backend: rows survive growth without moving,
 * the backend's table matches the host's after a sync, pages go back to the pool and serve the
 * next store, and a sequence's state gives back every page it took. */
#include "backend_cpu.h"
#include "pagestore.h"
#include "seqstate.h"
#include "testlib.h"
#include "testmodel.h"
#include "testnum.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static backend_t *bk;

static void test_growth_keeps_rows(void) {
    enum { COLS = 12, FIRST = 70, ALL = 600 };
    pagepool_t *pp = pagepool_new(bk, COLS);
    pagestore_t s = pagestore_new(pp);
    float *v = t_rand_vec((size_t)(ALL * COLS), 1.0f), *got = xmalloc((size_t)(ALL * COLS) * 4);
    pagestore_reserve(&s, FIRST);
    CHECK_EQ(s.n_pages, 2);
    pagestore_upload(&s, 0, FIRST, v);
    void *first_page = s.pages[0];
    pagestore_reserve(&s, ALL); /* the table grows from 4 to 16 addresses */
    CHECK_EQ(s.n_pages, (ALL + BK_PAGE_ROWS - 1) / BK_PAGE_ROWS);
    CHECK(s.pages[0] == first_page); /* nothing moved */
    pagestore_upload(&s, FIRST, ALL - FIRST, v + FIRST * COLS);
    pagestore_download(&s, 0, ALL, got);
    CHECK(!memcmp(got, v, (size_t)(ALL * COLS) * 4));
    CHECK_EQ(pagepool_in_use(pp), s.n_pages);
    pagestore_release(&s);
    CHECK_EQ(pagepool_in_use(pp), 0);
    pagepool_free(pp);
    free(v), free(got);
}

/* The backend's table holds the host's addresses once synced, the pages grown since included. */
static void test_sync_table(void) {
    pagepool_t *pp = pagepool_new(bk, 8);
    pagestore_t s = pagestore_new(pp);
    for (int64_t rows = 1; rows <= 1000; rows += 137) {
        pagestore_reserve(&s, rows);
        CHECK(s.synced < s.n_pages || rows <= s.synced * BK_PAGE_ROWS);
        pagestore_sync(&s);
        bk_paged_t v = pagestore_view(&s, rows);
        CHECK_EQ(v.rows, rows);
        CHECK(!memcmp(v.table, s.pages, (size_t)s.n_pages * sizeof *s.pages)); /* the CPU backend's memory is the host's */
    }
    pagestore_release(&s);
    pagepool_free(pp);
}

/* Pages given back serve the next store; the pool carves more only when none is free. */
static void test_reuse(void) {
    pagepool_t *pp = pagepool_new(bk, 4);
    pagestore_t a = pagestore_new(pp), b = pagestore_new(pp);
    pagestore_reserve(&a, 20 * BK_PAGE_ROWS);
    int64_t carved = pagepool_pages(pp);
    CHECK(carved >= 20);
    pagestore_release(&a);
    pagestore_reserve(&b, 20 * BK_PAGE_ROWS);
    CHECK_EQ(pagepool_pages(pp), carved);
    CHECK_EQ(pagepool_bytes(pp), carved * BK_PAGE_ROWS * 4 * 4);
    CHECK_EQ(pagepool_in_use(pp), 20);
    pagestore_release(&b);
    pagepool_free(pp);
}

/* A sequence of the tiny model: its layers' stores draw from the model's pools and give
 * everything back when it ends. */
static void test_seqstate_pages(void) {
    char tmp[] = "/tmp/di-pagestore-XXXXXX", err[256] = "";
    model_t m;
    bool ok = mkdtemp(tmp) != NULL && t_tiny_model(tmp, "a", 512, 7, true, err, sizeof err) == 0 &&
              model_open(&m, tmp, bk, NULL, err, sizeof err) == 0;
    CHECKF(ok, "set-up failed: %s", err);
    if (!ok) {
        t_remove_tree(tmp);
        return;
    }
    seqstate_t *st = seqstate_new(&m, true);
    int64_t want = 0;
    for (int L = 0; L < m.cfg.n_layers; L++)
        if (m.cfg.layers[L].has_compressor) {
            seqstate_reserve(st, L, 3 * BK_PAGE_ROWS + 1);
            seqstate_sync(st, L);
            CHECK_EQ(seqstate_pool(st, L, 3 * BK_PAGE_ROWS + 1).rows, 3 * BK_PAGE_ROWS + 1);
            want += 4;
        }
    CHECK(want > 0);
    CHECK_EQ(pagepool_in_use(m.pool_pages), want);
    seqstate_free(st);
    CHECK_EQ(pagepool_in_use(m.pool_pages), 0);
    CHECK_EQ(m.key_pages ? pagepool_in_use(m.key_pages) : 0, 0);
    model_close(&m);
    t_remove_tree(tmp);
}

int main(void) {
    bk = backend_cpu_create(1);
    RUN(test_growth_keeps_rows);
    RUN(test_sync_table);
    RUN(test_reuse);
    RUN(test_seqstate_pages);
    bk->destroy(bk);
    return t_finish();
}
