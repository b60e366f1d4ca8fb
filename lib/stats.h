/* --stats: what a stage did, printed on stderr at exit, one "key value" pair per line
 * under a header naming the stage, so a profile of the pipeline is a grep away. */
#ifndef DI_STATS_H
#define DI_STATS_H

#include "io.h"

#include <stdint.h>

typedef struct {
    const char *stage;
    uint64_t start_ns;
    uint64_t busy_ns;      /* time spent working on requests (not waiting for input) */
    uint64_t requests;     /* requests handled */
    uint64_t errors;       /* error results written for requests */
    uint64_t bad_input;    /* input the stage could not attribute to a request */
} stage_stats_t;

void stats_start(stage_stats_t *s, const char *stage);
/* in/out may be NULL for stages whose ends are not frame streams. */
void stats_print(const stage_stats_t *s, const io_counters_t *in, const io_counters_t *out);

#endif
