/* Numbers between bounds, as automata over their decimal spelling.
 *
 * Integers are exact: the bound's exact value (a JSON integer, or the double a JSON real
 * denotes) is compared digit by digit, so "minimum": 2.5 gives 3, 4, ... and nothing else.
 *
 * Numbers (type "number") with a bound are written in plain decimal (no exponent) with at
 * most 15 digits. Any two such decimals are distinct doubles in the same order, so after
 * rounding the bound itself outward-safe to 15 significant digits (up for a minimum, down
 * for a maximum) a decimal comparison gives the same answer as a validator comparing
 * doubles, strict bounds included. Unbounded numbers use the full JSON number syntax. */
#include "grammar_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUMBER_DIGITS 15

/* A non-negative decimal: integer digits without leading zeros ("0" for none) and
 * fraction digits without trailing zeros. */
typedef struct {
    bool negative;
    char ip[400];
    char fp[1200];
} dec_t;

static void dec_normalize(dec_t *d)
{
    size_t lead = 0, n = strlen(d->ip);
    while (lead + 1 < n && d->ip[lead] == '0') lead++;
    memmove(d->ip, d->ip + lead, n - lead + 1);
    size_t f = strlen(d->fp);
    while (f && d->fp[f - 1] == '0') d->fp[--f] = 0;
    if (!strcmp(d->ip, "0") && !f) d->negative = false;
}

/* The exact value of a JSON number (an integer, or the double a real stands for). */
static bool dec_from_json(gctx_t *c, const json_t *j, dec_t *d)
{
    memset(d, 0, sizeof *d);
    if (json_is_integer(j)) {
        long long v = json_integer_value(j);
        d->negative = v < 0;
        unsigned long long m = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
        snprintf(d->ip, sizeof d->ip, "%llu", m);
        return true;
    }
    double x = json_real_value(j);
    if (!isfinite(x)) return g_fail(c, "a bound is not a finite number");
    d->negative = signbit(x) != 0;
    char buf[1500];
    snprintf(buf, sizeof buf, "%.1100f", fabs(x));
    char *dot = strchr(buf, '.');
    *dot = 0;
    if (strlen(buf) >= sizeof d->ip) return g_fail(c, "a bound is too large");
    strcpy(d->ip, buf);
    snprintf(d->fp, sizeof d->fp, "%s", dot + 1);
    dec_normalize(d);
    return true;
}

/* Rounds |d| to NUMBER_DIGITS significant digits, away from zero (up) or towards it. */
static void dec_round(dec_t *d, bool up)
{
    char digits[1600];
    size_t ni = strlen(d->ip);
    snprintf(digits, sizeof digits, "%s%s", d->ip, d->fp);
    size_t total = strlen(digits), first = 0;
    while (first < total && digits[first] == '0') first++;
    if (first == total) return;
    size_t keep = first + NUMBER_DIGITS;
    if (keep >= total) return;
    bool rest = false;
    for (size_t k = keep; k < total; k++) rest |= digits[k] != '0';
    digits[keep] = 0;
    if (rest && up) {
        size_t k = keep;
        while (k > 0 && digits[k - 1] == '9') digits[--k] = '0';
        if (k == 0) { /* 999.. -> 1000..: one more integer digit */
            memmove(digits + 1, digits, keep + 1);
            digits[0] = '1';
            ni++;
            keep++;
        } else {
            digits[k - 1]++;
        }
    }
    for (size_t k = keep; k < ni; k++) digits[k] = '0'; /* kept digits may end in the integer part */
    digits[keep > ni ? keep : ni] = 0;
    memcpy(d->ip, digits, ni);
    d->ip[ni] = 0;
    snprintf(d->fp, sizeof d->fp, "%s", keep > ni ? digits + ni : "");
    dec_normalize(d);
}

/* ---- comparison automata over unsigned decimals ------------------------------------------ */

typedef struct {
    gctx_t *c;
    bool frac;   /* fractions allowed (numbers) or not (integers) */
} nb_t;

static ast_t *digit(nb_t *b) { return ast_range(b->c, '0', '9'); }
static ast_t *digits(nb_t *b, uint32_t min, uint32_t max) { return ast_repeat(b->c, digit(b), min, max); }
static ast_t *lit_char(nb_t *b, char ch) { return ast_bytes(b->c, &ch, 1); }

static ast_t *frac_any(nb_t *b)
{
    return b->frac ? ast_opt(b->c, ast_seq2(b->c, ast_str(b->c, "."), digits(b, 1, G_INF))) : ast_empty(b->c);
}

static ast_t *int_any(nb_t *b)
{
    return ast_or2(b->c, ast_str(b->c, "0"), ast_seq2(b->c, ast_range(b->c, '1', '9'), digits(b, 0, G_INF)));
}

static ast_t *unsigned_any(nb_t *b) { return ast_seq2(b->c, int_any(b), frac_any(b)); }

/* Integer parts (no leading zeros) greater than ip. */
static ast_t *int_gt(nb_t *b, const char *ip)
{
    size_t L = strlen(ip);
    if (!strcmp(ip, "0")) return ast_seq2(b->c, ast_range(b->c, '1', '9'), digits(b, 0, G_INF));
    ast_t *longer = ast_seq2(b->c, ast_range(b->c, '1', '9'), digits(b, (uint32_t)L, G_INF));
    /* same length: G(k) = [ip[k]+1 - 9] D{L-k-1} | ip[k] G(k+1) */
    ast_t *g = ast_fail(b->c);
    for (size_t k = L; k-- > 0;) {
        ast_t *alts[2] = {ast_seq2(b->c, lit_char(b, ip[k]), g), NULL};
        uint32_t n = 1;
        if (ip[k] < '9') alts[n++] = ast_seq2(b->c, ast_range(b->c, (uint32_t)ip[k] + 1, '9'), digits(b, (uint32_t)(L - k - 1), (uint32_t)(L - k - 1)));
        g = ast_alt(b->c, alts, n);
    }
    return ast_or2(b->c, longer, g);
}

/* Integer parts less than ip. */
static ast_t *int_lt(nb_t *b, const char *ip)
{
    size_t L = strlen(ip);
    if (!strcmp(ip, "0")) return ast_fail(b->c);
    if (L == 1) return ast_range(b->c, '0', (uint32_t)ip[0] - 1);
    ast_t *shorter = ast_or2(b->c, ast_str(b->c, "0"), ast_seq2(b->c, ast_range(b->c, '1', '9'), digits(b, 0, (uint32_t)(L - 2))));
    ast_t *g = ast_fail(b->c);
    for (size_t k = L; k-- > 0;) {
        ast_t *alts[2] = {ast_seq2(b->c, lit_char(b, ip[k]), g), NULL};
        uint32_t n = 1;
        char lo = k == 0 ? '1' : '0';
        if (ip[k] > lo) alts[n++] = ast_seq2(b->c, ast_range(b->c, (uint32_t)lo, (uint32_t)ip[k] - 1), digits(b, (uint32_t)(L - k - 1), (uint32_t)(L - k - 1)));
        g = ast_alt(b->c, alts, n);
    }
    return ast_or2(b->c, shorter, g);
}

/* Fractions (the part after the integer part, '.' included or absent) comparing to fp
 * as asked, given equal integer parts. */
static ast_t *frac_cmp(nb_t *b, const char *fp, cmp_t op)
{
    gctx_t *c = b->c;
    size_t L = strlen(fp);
    if (!b->frac) {
        /* no fraction: the value equals the integer part */
        bool holds = op == CMP_GE ? L == 0 : op == CMP_LE ? true : op == CMP_LT ? L > 0 : false;
        return holds ? ast_empty(c) : ast_fail(c);
    }
    ast_t *dot = ast_str(c, ".");
    ast_t *any_digits = digits(b, 0, G_INF);
    if (op == CMP_GE || op == CMP_GT) {
        /* tail after all of fp: anything (>=) or something non-zero (>) */
        ast_t *tail = op == CMP_GE ? any_digits : ast_seq3(c, any_digits, ast_range(c, '1', '9'), any_digits);
        if (L == 0) return op == CMP_GE ? frac_any(b) : ast_seq2(c, dot, tail);
        ast_t *g = tail;
        for (size_t k = L; k-- > 0;) {
            ast_t *alts[2] = {ast_seq2(c, lit_char(b, fp[k]), g), NULL};
            uint32_t n = 1;
            if (fp[k] < '9') alts[n++] = ast_seq2(c, ast_range(c, (uint32_t)fp[k] + 1, '9'), any_digits);
            g = ast_alt(c, alts, n);
        }
        return ast_seq2(c, dot, g);
    }
    /* <= or <: no fraction at all is fine (x equals the integer part, and fp > 0 for <) */
    if (L == 0) return op == CMP_LE ? ast_opt(c, ast_seq2(c, dot, ast_repeat(c, ast_str(c, "0"), 1, G_INF))) : ast_fail(c);
    ast_t *g = op == CMP_LE ? ast_repeat(c, ast_str(c, "0"), 0, G_INF) : ast_fail(c);
    for (size_t k = L; k-- > 0;) {
        ast_t *alts[3];
        uint32_t n = 0;
        alts[n++] = ast_seq2(c, lit_char(b, fp[k]), g);
        if (fp[k] > '0') alts[n++] = ast_seq2(c, ast_range(c, '0', (uint32_t)fp[k] - 1), any_digits);
        if (k > 0) alts[n++] = ast_empty(c); /* stop here: the rest reads as zeros, below fp */
        g = ast_alt(c, alts, n);
    }
    return ast_opt(c, ast_seq2(c, dot, g));
}

/* Unsigned decimals x with x op d (d non-negative). */
static ast_t *unsigned_cmp(nb_t *b, const dec_t *d, cmp_t op)
{
    ast_t *other = op == CMP_GE || op == CMP_GT ? int_gt(b, d->ip) : int_lt(b, d->ip);
    return ast_or2(b->c, ast_seq2(b->c, other, frac_any(b)), ast_seq2(b->c, ast_str(b->c, d->ip), frac_cmp(b, d->fp, op)));
}

static bool dec_is_zero(const dec_t *d) { return !strcmp(d->ip, "0") && !d->fp[0]; }

/* Signed decimals x with x >= d (or >, <=, <). */
static ast_t *signed_cmp(nb_t *b, const dec_t *d, cmp_t op)
{
    gctx_t *c = b->c;
    ast_t *minus = ast_str(c, "-");
    static const cmp_t flip[] = {[CMP_GE] = CMP_LE, [CMP_GT] = CMP_LT, [CMP_LE] = CMP_GE, [CMP_LT] = CMP_GT};
    bool lower = op == CMP_GE || op == CMP_GT;
    if (lower) {
        if (!d->negative) return unsigned_cmp(b, d, op);
        /* every non-negative value, and negatives no further from zero than |d| */
        return ast_or2(c, unsigned_any(b), ast_seq2(c, minus, unsigned_cmp(b, d, flip[op])));
    }
    if (d->negative) return ast_seq2(c, minus, unsigned_cmp(b, d, flip[op]));
    if (op == CMP_LT && dec_is_zero(d)) return ast_seq2(c, minus, unsigned_cmp(b, d, CMP_GT));
    return ast_or2(c, unsigned_cmp(b, d, op), ast_seq2(c, minus, unsigned_any(b)));
}

/* ---- entry points ------------------------------------------------------------------------- */

static ast_t *bounded(gctx_t *c, const num_bound_t *bs, uint32_t n, bool frac, ast_t *shape)
{
    nb_t b = {c, frac};
    dfa_t *acc = dfa_from_ast(c, shape);
    for (uint32_t i = 0; i < n && acc; i++) {
        dec_t d;
        bool lower = bs[i].op == CMP_GE || bs[i].op == CMP_GT;
        if (!dec_from_json(c, bs[i].value, &d)) break;
        if (frac) dec_round(&d, lower != d.negative);
        else if (d.fp[0]) strcpy(d.fp, "1"); /* an integer only cares whether there is a fraction */
        dfa_t *x = dfa_from_ast(c, signed_cmp(&b, &d, bs[i].op));
        dfa_t *p = x ? dfa_product(c, acc, x, false) : NULL;
        dfa_free(acc);
        dfa_free(x);
        acc = p;
    }
    if (!acc || c->failed) {
        dfa_free(acc);
        return NULL;
    }
    g_own_dfa(c, acc);
    if (dfa_is_empty(acc)) {
        if (frac) g_fail(c, "no plain decimal of at most %d digits satisfies the bounds", NUMBER_DIGITS);
        else g_fail(c, "no integer satisfies the bounds");
        return NULL;
    }
    return ast_dfa(c, acc, false);
}

ast_t *json_integer_ast(gctx_t *c, const num_bound_t *bs, uint32_t n)
{
    nb_t b = {c, false};
    ast_t *shape = ast_seq2(c, ast_opt(c, ast_str(c, "-")), int_any(&b));
    return n ? bounded(c, bs, n, false, shape) : shape;
}

ast_t *json_number_ast(gctx_t *c, const num_bound_t *bs, uint32_t n)
{
    if (!n) return json_number_any(c);
    nb_t b = {c, true};
    /* plain decimals with at most NUMBER_DIGITS digits (a lone leading 0 not counted) */
    astv_t alts = {0};
    astv_push(&alts, ast_seq2(c, ast_str(c, "0"), ast_opt(c, ast_seq2(c, ast_str(c, "."), digits(&b, 1, NUMBER_DIGITS)))));
    for (uint32_t len = 1; len <= NUMBER_DIGITS; len++) {
        ast_t *ip = ast_seq2(c, ast_range(c, '1', '9'), digits(&b, len - 1, len - 1));
        ast_t *fp = len < NUMBER_DIGITS ? ast_opt(c, ast_seq2(c, ast_str(c, "."), digits(&b, 1, NUMBER_DIGITS - len))) : ast_empty(c);
        astv_push(&alts, ast_seq2(c, ip, fp));
    }
    ast_t *shape = ast_seq2(c, ast_opt(c, ast_str(c, "-")), ast_alt(c, alts.v, alts.n));
    astv_free(&alts);
    return bounded(c, bs, n, true, shape);
}
