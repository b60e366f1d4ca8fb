/* The origin's books: it numbers requests (seq), remembers their ids to refuse duplicates
 * (two answers with one id could not be told apart), and makes the end-of-stream ledger. */
#ifndef DI_ORIGIN_H
#define DI_ORIGIN_H

#include "ledger.h"
#include "u64map.h"

#include <stdint.h>

typedef struct {
    u64map_t by_hash; /* FNV-1a of an id -> seq + 1 of its first request */
    char **ids;       /* by seq; "" where a line had no readable id */
    uint64_t n;
} origin_t;

/* The seq of an earlier request with this id, or -1. */
int64_t origin_find(const origin_t *o, const char *id);
/* Records the next request (id may be NULL) and returns its seq. */
uint64_t origin_add(origin_t *o, const char *id);
/* A ledger over the books (borrowing them): announced = requests recorded. */
ledger_t origin_ledger(const origin_t *o, const char *stage);
void origin_free(origin_t *o);

#endif
