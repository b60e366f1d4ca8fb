/* Python-style and compact JSON writers (see chat_json.h). */
#include "chat_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *item_sep, *key_sep;
    int sci_below, sci_from; /* decimal exponents written in fixed notation: [below, from) */
    bool pad_exponent;       /* Python writes e-07, the compact style e-7 */
} json_style_t;

static const json_style_t STYLES[] = {
    [CHAT_JSON_PYTHON] = {", ", ": ", -4, 16, true},
    [CHAT_JSON_SPACED] = {", ", ": ", -5, 16, false},
    [CHAT_JSON_COMPACT] = {",", ":", -5, 16, false},
};

static void write_string(buf_t *out, const char *s, size_t n) {
    buf_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': buf_puts(out, "\\\""); break;
        case '\\': buf_puts(out, "\\\\"); break;
        case '\n': buf_puts(out, "\\n"); break;
        case '\r': buf_puts(out, "\\r"); break;
        case '\t': buf_puts(out, "\\t"); break;
        case '\b': buf_puts(out, "\\b"); break;
        case '\f': buf_puts(out, "\\f"); break;
        default:
            if (c < 0x20) buf_printf(out, "\\u%04x", c);
            else buf_putc(out, c);
        }
    }
    buf_putc(out, '"');
}

/* Shortest decimal digits that read back as v, and the decimal exponent of the first one. */
static void shortest_digits(double v, char *digits, int *exp10) {
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v || prec == 17) break;
    }
    /* tmp is "d.ddde[+-]xx" (or "de[+-]xx"); v is finite and non-negative here. */
    size_t k = 0;
    const char *p = tmp;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[k++] = *p;
    while (k > 1 && digits[k - 1] == '0') k--; /* "%.*e" pads when prec was the last try */
    digits[k] = 0;
    *exp10 = atoi(p + 1);
}

static void write_real(buf_t *out, double v, const json_style_t *st) {
    if (v == 0) {
        buf_puts(out, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    if (v < 0) {
        buf_putc(out, '-');
        v = -v;
    }
    char d[24];
    int e;
    shortest_digits(v, d, &e);
    int nd = (int)strlen(d);
    if (e >= st->sci_below && e < st->sci_from) {
        if (e < 0) {
            buf_puts(out, "0.");
            for (int i = 0; i < -e - 1; i++) buf_putc(out, '0');
            buf_puts(out, d);
        } else if (nd <= e + 1) {
            buf_puts(out, d);
            for (int i = nd; i < e + 1; i++) buf_putc(out, '0');
            buf_puts(out, ".0");
        } else {
            buf_append(out, d, (size_t)e + 1);
            buf_putc(out, '.');
            buf_puts(out, d + e + 1);
        }
        return;
    }
    buf_putc(out, d[0]);
    if (nd > 1) {
        buf_putc(out, '.');
        buf_puts(out, d + 1);
    }
    buf_printf(out, st->pad_exponent ? "e%c%02d" : "e%c%d", e < 0 ? '-' : '+', abs(e));
}

static void write_value(buf_t *out, const json_t *v, const json_style_t *st) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *item;
        bool first = true;
        buf_putc(out, '{');
        json_object_foreach((json_t *)v, key, item) {
            if (!first) buf_puts(out, st->item_sep);
            first = false;
            write_string(out, key, strlen(key));
            buf_puts(out, st->key_sep);
            write_value(out, item, st);
        }
        buf_putc(out, '}');
        break;
    }
    case JSON_ARRAY:
        buf_putc(out, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) buf_puts(out, st->item_sep);
            write_value(out, json_array_get(v, i), st);
        }
        buf_putc(out, ']');
        break;
    case JSON_STRING: write_string(out, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: buf_printf(out, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: write_real(out, json_real_value(v), st); break;
    case JSON_TRUE: buf_puts(out, "true"); break;
    case JSON_FALSE: buf_puts(out, "false"); break;
    case JSON_NULL: buf_puts(out, "null"); break;
    }
}

void chat_json_write(buf_t *out, const json_t *v, chat_json_style_t style) { write_value(out, v, &STYLES[style]); }
