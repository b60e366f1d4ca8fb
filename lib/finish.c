#include "finish.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int finish_init(finish_t *fi, const frame_t *f, int64_t prompt, const finish_limits_t *lim, const tokenizer_t *tok,
                char *err, size_t errlen) {
    *fi = (finish_t){.eos = lim->eos};
    fi->max_tokens = f->params.max_tokens > 0 ? f->params.max_tokens : lim->default_max_tokens;
    fi->limit = lim->context - prompt; /* output tokens that fit */
    if (f->meta.n_stop) {
        if (!tok) {
            snprintf(err, errlen, "stop strings need the model's tokenizer, which this worker has not loaded");
            return -1;
        }
        fi->text = response_new(tok, f->id, &f->meta);
    }
    if (f->params.n_stop_ids) {
        fi->n_stop_ids = f->params.n_stop_ids;
        fi->stop_ids = xmalloc(fi->n_stop_ids * sizeof *fi->stop_ids);
        memcpy(fi->stop_ids, f->params.stop_ids, fi->n_stop_ids * sizeof *fi->stop_ids);
    }
    return 0;
}

const char *finish_push(finish_t *fi, uint32_t token, bool may_stop) {
    fi->produced++;
    if ((int64_t)token == fi->eos) return "stop";
    for (uint32_t i = 0; i < fi->n_stop_ids && may_stop; i++)
        if (token == fi->stop_ids[i]) return "stop";
    char err[128];
    if (fi->text && response_push(fi->text, &token, 1, NULL, err, sizeof err) == 1) return "stop";
    if (fi->produced >= fi->max_tokens || fi->produced >= fi->limit) return "length";
    return NULL;
}

void finish_free(finish_t *fi) {
    response_free(fi->text);
    free(fi->stop_ids);
    *fi = (finish_t){0};
}
