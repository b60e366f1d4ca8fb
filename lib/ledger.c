#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

int ledger_add(ledger_t *l, const frame_eos_t *eos, char *err, size_t errlen)
{
    if (l->heard) {
        if (strcmp(l->origin, eos->origin) != 0) {
            snprintf(err, errlen, "end-of-stream from origin '%s' while reading origin '%s': one origin per pipeline",
                     eos->origin, l->origin);
            return -1;
        }
        if (l->announced != eos->announced) {
            snprintf(err, errlen, "end-of-stream announces %llu requests, an earlier one %llu",
                     (unsigned long long)eos->announced, (unsigned long long)l->announced);
            return -1;
        }
    } else {
        l->heard = true;
        l->origin = xstrdup(eos->origin);
        l->announced = eos->announced;
    }
    if (!l->n_ids && eos->n_ids) {
        l->ids = xmalloc(eos->n_ids * sizeof *l->ids);
        for (uint64_t i = 0; i < eos->n_ids; i++) l->ids[i] = xstrdup(eos->ids[i]);
        l->n_ids = eos->n_ids;
    }
    for (uint32_t i = 0; i < l->n_senders; i++)
        if (!strcmp(l->senders[i].sender, eos->sender)) return 0;
    l->senders = xrealloc(l->senders, (l->n_senders + 1) * sizeof *l->senders);
    l->senders[l->n_senders++] = (ledger_sender_t){xstrdup(eos->sender), eos->served};
    l->served += eos->served;
    return 0;
}

bool ledger_complete(const ledger_t *l)
{
    return l->heard && l->served >= l->announced;
}

void ledger_free(ledger_t *l)
{
    free(l->origin);
    for (uint64_t i = 0; i < l->n_ids; i++) free(l->ids[i]);
    free(l->ids);
    for (uint32_t i = 0; i < l->n_senders; i++) free(l->senders[i].sender);
    free(l->senders);
    *l = (ledger_t){0};
}

const char *ledger_instance_id(const char *stage)
{
    static char id[256];
    if (!id[0]) {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        unsigned random_part = 0;
        if (getrandom(&random_part, sizeof random_part, 0) != sizeof random_part) random_part = (unsigned)now_ns();
        snprintf(id, sizeof id, "%s@%s:%d:%08x", stage, host, (int)getpid(), random_part);
    }
    return id;
}
