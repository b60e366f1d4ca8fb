#include "stats.h"

#include <stdio.h>

void stats_start(stage_stats_t *s, const char *stage)
{
    *s = (stage_stats_t){.stage = stage, .start_ns = now_ns()};
}

static void print_counters(const char *stage, const char *dir, const io_counters_t *c)
{
    fprintf(stderr, "%s: stats: %s_frames %llu\n", stage, dir, (unsigned long long)c->frames);
    fprintf(stderr, "%s: stats: %s_bytes %llu\n", stage, dir, (unsigned long long)c->bytes);
    if (c->bad) fprintf(stderr, "%s: stats: %s_bad %llu\n", stage, dir, (unsigned long long)c->bad);
    for (int t = FRAME_REQUEST; t <= FRAME_TYPE_LAST; t++)
        if (c->by_type[t])
            fprintf(stderr, "%s: stats: %s_%s %llu\n", stage, dir, frame_type_name((frame_type_t)t),
                    (unsigned long long)c->by_type[t]);
}

void stats_print(const stage_stats_t *s, const io_counters_t *in, const io_counters_t *out)
{
    double wall = (double)(now_ns() - s->start_ns) / 1e9, busy = (double)s->busy_ns / 1e9;
    fprintf(stderr, "%s: stats: requests %llu\n", s->stage, (unsigned long long)s->requests);
    fprintf(stderr, "%s: stats: errors %llu\n", s->stage, (unsigned long long)s->errors);
    if (s->bad_input) fprintf(stderr, "%s: stats: bad_input %llu\n", s->stage, (unsigned long long)s->bad_input);
    if (in) print_counters(s->stage, "in", in);
    if (out) print_counters(s->stage, "out", out);
    fprintf(stderr, "%s: stats: wall_s %.6f\n", s->stage, wall);
    fprintf(stderr, "%s: stats: busy_s %.6f\n", s->stage, busy);
    if (s->requests && busy > 0)
        fprintf(stderr, "%s: stats: requests_per_busy_s %.1f\n", s->stage, (double)s->requests / busy);
}
