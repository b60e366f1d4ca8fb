#include "logits_report.h"
#include "utf8.h"
#include "util.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A token's text, printable: valid UTF-8 kept (control characters escaped), other bytes \xNN. */
static void token_text(const tokenizer_t *tok, uint32_t id, buf_t *b) {
    buf_clear(b);
    size_t n = 0;
    const uint8_t *p = tok ? tokenizer_token_bytes(tok, id, &n) : NULL;
    for (size_t i = 0; p && i < n;) {
        size_t k = utf8_sequence_length(p + i, n - i);
        if (k == 0) buf_printf(b, "\\x%02X", p[i++]);
        else if (k == 1 && p[i] == '\n') buf_puts(b, "\\n"), i++;
        else if (k == 1 && p[i] == '\t') buf_puts(b, "\\t"), i++;
        else if (k == 1 && p[i] < 0x20) buf_printf(b, "\\x%02X", p[i++]);
        else buf_append(b, p + i, k), i += k;
    }
    buf_cstr(b);
}

typedef struct {
    float v;
    uint32_t id;
} entry_t;

static int by_logit(const void *a, const void *b) {
    const entry_t *x = a, *y = b;
    return x->v != y->v ? (x->v > y->v ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

/* The k largest logits of a row, best first (ties: lower id), and the log of the softmax
 * normalizer. */
static int top(const float *row, int64_t vocab, int k, entry_t *out, double *log_z) {
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < vocab; v++) mx = fmax(mx, row[v]);
    for (int64_t v = 0; v < vocab; v++) z += exp((double)row[v] - mx);
    *log_z = mx + log(z);
    if (k > 64) { /* many: sort them all */
        entry_t *all = xmalloc((size_t)vocab * sizeof *all);
        for (int64_t v = 0; v < vocab; v++) all[v] = (entry_t){row[v], (uint32_t)v};
        qsort(all, (size_t)vocab, sizeof *all, by_logit);
        memcpy(out, all, (size_t)k * sizeof *out);
        free(all);
        return k;
    }
    int n = 0;
    for (int64_t v = 0; v < vocab; v++) {
        entry_t e = {row[v], (uint32_t)v};
        if (n < k) out[n++] = e;
        else if (by_logit(&e, &out[n - 1]) < 0) out[n - 1] = e;
        else continue;
        for (int i = n - 1; i > 0 && by_logit(&out[i], &out[i - 1]) < 0; i--) {
            entry_t t = out[i];
            out[i] = out[i - 1];
            out[i - 1] = t;
        }
    }
    return n;
}

void logits_report(FILE *out, const logits_report_opts_t *o, const uint32_t *ids, int64_t n_ids, const float *logits,
                   int64_t rows, int64_t first_pos, int64_t vocab) {
    int k = o->top_k > 0 && o->top_k < vocab ? o->top_k : (int)vocab;
    entry_t *best = xmalloc((size_t)k * sizeof *best);
    buf_t text = {0};
    json_t *doc = NULL, *positions = NULL;
    if (o->json) {
        doc = json_object();
        json_object_set_new(doc, "model", json_string(o->model));
        json_object_set_new(doc, "qat", json_boolean(o->qat));
        json_object_set_new(doc, "replay", o->replay < 0 ? json_null() : json_integer(o->replay));
        json_t *toks = json_array();
        for (int64_t i = 0; i < n_ids; i++) json_array_append_new(toks, json_integer(ids[i]));
        json_object_set_new(doc, "tokens", toks);
        positions = json_array();
        json_object_set_new(doc, "positions", positions);
    } else {
        fprintf(out, "model %s, %lld tokens, QAT %s, %s\n", o->model, (long long)n_ids, o->qat ? "on" : "off",
                o->replay < 0 ? "exact prefill" : "bounded replay");
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *row = logits + r * vocab;
        int64_t pos = first_pos + r;
        double log_z;
        int n = o->top_k > 0 ? top(row, vocab, k, best, &log_z) : 0;
        if (o->top_k <= 0) top(row, vocab, 1, best, &log_z);
        token_text(o->tok, ids[pos], &text);
        if (o->json) {
            json_t *p = json_object();
            json_object_set_new(p, "position", json_integer(pos));
            json_object_set_new(p, "token", json_integer(ids[pos]));
            if (o->tok) json_object_set_new(p, "text", json_string((const char *)text.data));
            json_t *list = json_array();
            if (o->top_k > 0)
                for (int i = 0; i < n; i++) {
                    json_t *e = json_object();
                    json_object_set_new(e, "id", json_integer(best[i].id));
                    json_object_set_new(e, "logit", json_real(best[i].v));
                    json_object_set_new(e, "prob", json_real(exp(best[i].v - log_z)));
                    if (o->tok) {
                        token_text(o->tok, best[i].id, &text);
                        json_object_set_new(e, "text", json_string((const char *)text.data));
                    }
                    json_array_append_new(list, e);
                }
            else
                for (int64_t v = 0; v < vocab; v++) json_array_append_new(list, json_real(row[v]));
            json_object_set_new(p, o->top_k > 0 ? "top" : "logits", list);
            json_array_append_new(positions, p);
            continue;
        }
        fprintf(out, "\nposition %lld, token %u%s%s%s\n", (long long)pos, ids[pos], o->tok ? " \"" : "",
                o->tok ? (const char *)text.data : "", o->tok ? "\"" : "");
        if (o->top_k <= 0) {
            for (int64_t v = 0; v < vocab; v++) fprintf(out, "  %8lld %12.6f\n", (long long)v, row[v]);
            continue;
        }
        fprintf(out, "  %4s %8s %12s %10s%s\n", "rank", "id", "logit", "prob", o->tok ? "  text" : "");
        for (int i = 0; i < n; i++) {
            token_text(o->tok, best[i].id, &text);
            fprintf(out, "  %4d %8u %12.6f %10.6f%s%s%s\n", i + 1, best[i].id, best[i].v, exp(best[i].v - log_z),
                    o->tok ? "  \"" : "", o->tok ? (const char *)text.data : "", o->tok ? "\"" : "");
        }
    }
    if (doc) {
        char *s = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(9));
        fprintf(out, "%s\n", s);
        free(s);
        json_decref(doc);
    }
    buf_free(&text);
    free(best);
}
