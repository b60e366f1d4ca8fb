/* When a request's generation ends (di-decode). After each output token, in this order:
 *   the end-of-sentence token (config eos_token_id) or one of the request's stop_token_ids -> "stop"
 *     (a stop token id only where it may end the output: see finish_push);
 *   a stop string completed in the text -> "stop", by the very rule the sink cuts the text with
 *     (response.h: the answer only, not reasoning or tool-call markup), so decode never
 *     generates past it;
 *   max_tokens output tokens (the request's, else the worker's default) -> "length";
 *   prompt + output tokens reaching the context -> "length".
 * The token that ends the request is part of the output (the sink leaves the end-of-sentence
 * token and the stop string out of the text). */
#ifndef DI_FINISH_H
#define DI_FINISH_H

#include "frame.h"
#include "response.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t eos;              /* -1: none */
    int64_t default_max_tokens;
    int64_t context;          /* positions the model may hold */
} finish_limits_t;

typedef struct {
    int64_t eos, max_tokens, limit, produced;
    uint32_t *stop_ids;
    uint32_t n_stop_ids;
    response_t *text;         /* only for requests with stop strings */
} finish_t;

/* For the request in f (its params, meta and id) with a prompt of `prompt` tokens. tok: the
 * tokenizer of the model's vocabulary, or NULL; a request with stop strings needs one.
 * 0, or -1 with err. */
int finish_init(finish_t *fi, const frame_t *f, int64_t prompt, const finish_limits_t *lim, const tokenizer_t *tok,
                char *err, size_t errlen);
/* Records the next output token: NULL while generation goes on, else the finish reason.
 * may_stop false: the token is not taken as a stop token id (a constrained output that is not
 * complete with it: the id is then text of the answer). */
const char *finish_push(finish_t *fi, uint32_t token, bool may_stop);
void finish_free(finish_t *fi);

#endif
