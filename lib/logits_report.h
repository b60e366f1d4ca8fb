/* Printing logits for people and scripts (di-prefill --logits): per position the top-k
 * tokens with logit and softmax probability, or every logit, as a table or as JSON. Token
 * text comes from the tokenizer when one is given; bytes that are not UTF-8 (a token may be
 * part of a character) are shown as \xNN. */
#ifndef DI_LOGITS_REPORT_H
#define DI_LOGITS_REPORT_H

#include "tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *model;      /* shown in the header */
    bool qat;
    int64_t replay;         /* -1: exact prefill */
    int top_k;              /* 0: every logit */
    bool json;
    const tokenizer_t *tok; /* NULL: ids only */
} logits_report_opts_t;

/* rows x vocab logits of the positions first_pos .. first_pos + rows - 1 of the prompt ids
 * (n_ids tokens; the token at a position is the one whose next token the row predicts). */
void logits_report(FILE *out, const logits_report_opts_t *o, const uint32_t *ids, int64_t n_ids, const float *logits,
                   int64_t rows, int64_t first_pos, int64_t vocab);

#endif
