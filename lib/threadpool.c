/* Fixed worker pool: a generation counter starts each loop, a count of workers still busy
 * ends it. Both sides spin briefly before sleeping on a condition variable: a decode step is
 * a few hundred short loops, and a sleep/wake pair can cost more than the loop. */
#include "threadpool.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SPINS 256 /* a few microseconds of polling before sleeping (longer hurts when cores are shared) */

struct threadpool {
    int n;                      /* threads including the caller */
    pthread_t *threads;         /* n - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint_fast64_t generation;
    atomic_int pending;         /* workers still running the current loop */
    atomic_bool quit;
    int parts;                  /* ranges in the current loop */
    tp_fn fn;
    void *ctx;
    int64_t n_items, per_part;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_part(threadpool_t *tp, int part) {
    int64_t i0 = part * tp->per_part, i1 = i0 + tp->per_part;
    if (i1 > tp->n_items) i1 = tp->n_items;
    if (i0 < i1) tp->fn(tp->ctx, i0, i1, part);
}

typedef struct {
    threadpool_t *tp;
    int id;
} worker_arg_t;

static void *worker_main(void *p) {
    worker_arg_t a = *(worker_arg_t *)p;
    free(p);
    threadpool_t *tp = a.tp;
    uint64_t seen = 0;
    for (;;) {
        for (int s = 0; s < SPINS && atomic_load(&tp->generation) == seen && !atomic_load(&tp->quit); s++) cpu_relax();
        if (atomic_load(&tp->generation) == seen) {
            pthread_mutex_lock(&tp->mu);
            while (!atomic_load(&tp->quit) && atomic_load(&tp->generation) == seen) pthread_cond_wait(&tp->wake, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->quit)) return NULL;
        seen = atomic_load(&tp->generation);
        if (a.id < tp->parts) run_part(tp, a.id);
        if (atomic_fetch_sub(&tp->pending, 1) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

threadpool_t *tp_create(int n_threads) {
    threadpool_t *tp = xcalloc(1, sizeof *tp);
    tp->n = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->quit, false);
    tp->threads = xcalloc((size_t)tp->n, sizeof *tp->threads);
    for (int i = 1; i < tp->n; i++) {
        worker_arg_t *a = xmalloc(sizeof *a);
        *a = (worker_arg_t){tp, i};
        if (pthread_create(&tp->threads[i - 1], NULL, worker_main, a)) die("threadpool: cannot start a thread");
    }
    return tp;
}

void tp_free(threadpool_t *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->quit, true);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    free(tp->threads);
    free(tp);
}

int tp_size(const threadpool_t *tp) { return tp->n; }

void tp_for(threadpool_t *tp, int64_t n, int64_t grain, tp_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t parts = (n + grain - 1) / grain;
    if (parts > tp->n) parts = tp->n;
    if (parts <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    tp->per_part = (n + parts - 1) / parts;
    tp->parts = (int)parts;
    atomic_store(&tp->pending, tp->n - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    run_part(tp, 0);
    for (int s = 0; s < SPINS && atomic_load(&tp->pending); s++) cpu_relax();
    if (atomic_load(&tp->pending)) {
        pthread_mutex_lock(&tp->mu);
        while (atomic_load(&tp->pending)) pthread_cond_wait(&tp->done, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
    }
}

int tp_default_threads(void) {
    int64_t v;
    const char *s = getenv("DI_THREADS");
    if (s && *s && parse_i64(s, 1, 256, &v)) return (int)v;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}
