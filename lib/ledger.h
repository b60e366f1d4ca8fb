/* The end-of-stream ledger (PROTOCOL.md, "End of stream"). The origin numbers requests and
 * announces how many it emitted; every stage reports in its eos how many requests it served
 * (wrote a terminal frame for). A reader's input is complete when the served counts of the
 * distinct senders it heard from add up to the origin's announced count: this holds for one
 * upstream, for N workers sharing a stage (fan-in), and for one stage feeding N (fan-out). */
#ifndef DI_LEDGER_H
#define DI_LEDGER_H

#include "frame.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char *sender;
    uint64_t served;
} ledger_sender_t;

typedef struct {
    bool heard;              /* at least one eos arrived */
    char *origin;
    uint64_t announced;
    char **ids;              /* the origin's ids in seq order, when some eos carried them */
    uint64_t n_ids;
    ledger_sender_t *senders;
    uint32_t n_senders;
    uint64_t served;         /* sum over distinct senders */
} ledger_t;

/* Records one eos frame (a repeat from a sender already heard is ignored). Returns -1 with
 * a reason when it contradicts what was heard (another origin, another announced count). */
int ledger_add(ledger_t *l, const frame_eos_t *eos, char *err, size_t errlen);
bool ledger_complete(const ledger_t *l);
void ledger_free(ledger_t *l);

/* A process-unique sender id: "<stage>@<host>:<pid>:<random>". Static storage. */
const char *ledger_instance_id(const char *stage);

#endif
