/* The JSON building blocks every JSON constraint shares: separators (the whitespace
 * policy: one optional space after ',' and ':', nothing anywhere else), strings, literals
 * in canonical form, and the grammar of any JSON value. */
#include "grammar_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

ast_t *json_sep_comma(gctx_t *c) { return ast_seq2(c, ast_str(c, ","), ast_opt(c, ast_str(c, " "))); }
ast_t *json_sep_colon(gctx_t *c) { return ast_seq2(c, ast_str(c, ":"), ast_opt(c, ast_str(c, " "))); }

/* Four hex digits that do not name a surrogate (a \u escape must stand for a character). */
static ast_t *hex4_non_surrogate(gctx_t *c)
{
    cpset_t hex = {0}, first = {0};
    cpset_add(&hex, '0', '9');
    cpset_add(&hex, 'a', 'f');
    cpset_add(&hex, 'A', 'F');
    cpset_add_set(&first, &hex);
    cpset_remove(&first, 'd', 'd');
    cpset_remove(&first, 'D', 'D');
    ast_t *h = ast_class(c, &hex);
    ast_t *plain = ast_seq2(c, ast_class(c, &first), ast_repeat(c, h, 3, 3));
    ast_t *d = ast_concat(c, (ast_t *[]){ast_or2(c, ast_str(c, "d"), ast_str(c, "D")), ast_range(c, '0', '7'), h, h}, 4);
    cpset_free(&hex);
    cpset_free(&first);
    return ast_or2(c, plain, d);
}

/* One character of a JSON string: raw (not '"', '\\' or a control) or escaped. With
 * `counted`, only the two-character escapes: a counted string repeats this once per
 * character, and the \uXXXX states would multiply the automaton for little gain (any
 * character can be written raw, and the controls without a short escape never). */
static ast_t *string_char(gctx_t *c, bool counted)
{
    cpset_t raw = {0};
    cpset_add(&raw, 0x20, G_MAX_CP);
    cpset_remove(&raw, '"', '"');
    cpset_remove(&raw, '\\', '\\');
    cpset_remove(&raw, 0xD800, 0xDFFF);
    ast_t *r = ast_class(c, &raw);
    cpset_free(&raw);
    cpset_t simple = {0};
    for (const char *p = "\"\\/bfnrt"; *p; p++) cpset_add(&simple, (uint8_t)*p, (uint8_t)*p);
    ast_t *after = ast_class(c, &simple);
    if (!counted) after = ast_or2(c, after, ast_seq2(c, ast_str(c, "u"), hex4_non_surrogate(c)));
    ast_t *esc = ast_seq2(c, ast_str(c, "\\"), after);
    cpset_free(&simple);
    return ast_or2(c, r, esc);
}

ast_t *json_string_any(gctx_t *c, uint32_t min, uint32_t max)
{
    bool counted = min > 0 || max != G_INF;
    return ast_seq3(c, ast_str(c, "\""), ast_repeat(c, string_char(c, counted), min, max), ast_str(c, "\""));
}

/* Scalars as jansson writes them (strings in UTF-8, escapes only where JSON needs them);
 * objects and arrays with the separators of the whitespace policy. */
ast_t *json_literal(gctx_t *c, const void *json_value)
{
    const json_t *v = json_value;
    if (json_is_object(v) || json_is_array(v)) {
        bool obj = json_is_object(v);
        astv_t parts = {0};
        astv_push(&parts, ast_str(c, obj ? "{" : "["));
        size_t n = obj ? json_object_size(v) : json_array_size(v), i = 0;
        void *it = obj ? json_object_iter((json_t *)v) : NULL;
        for (; i < n; i++) {
            if (i) astv_push(&parts, json_sep_comma(c));
            const json_t *item;
            if (obj) {
                json_t *k = json_string(json_object_iter_key(it));
                astv_push(&parts, json_literal(c, k));
                json_decref(k);
                astv_push(&parts, json_sep_colon(c));
                item = json_object_iter_value(it);
                it = json_object_iter_next((json_t *)v, it);
            } else {
                item = json_array_get(v, i);
            }
            ast_t *a = json_literal(c, item);
            if (!a) break;
            astv_push(&parts, a);
        }
        astv_push(&parts, ast_str(c, obj ? "}" : "]"));
        ast_t *a = c->failed ? NULL : ast_concat(c, parts.v, parts.n);
        astv_free(&parts);
        return a;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        g_fail(c, "a value cannot be serialised");
        return NULL;
    }
    ast_t *a = ast_str(c, s);
    free(s);
    return a;
}

ast_t *json_number_any(gctx_t *c)
{
    ast_t *digits = ast_repeat(c, ast_range(c, '0', '9'), 1, G_INF);
    ast_t *integer = ast_or2(c, ast_str(c, "0"), ast_seq2(c, ast_range(c, '1', '9'), ast_repeat(c, ast_range(c, '0', '9'), 0, G_INF)));
    ast_t *frac = ast_opt(c, ast_seq2(c, ast_str(c, "."), digits));
    cpset_t e = {0}, sign = {0};
    cpset_add(&e, 'e', 'e');
    cpset_add(&e, 'E', 'E');
    cpset_add(&sign, '+', '+');
    cpset_add(&sign, '-', '-');
    ast_t *exp = ast_opt(c, ast_seq3(c, ast_class(c, &e), ast_opt(c, ast_class(c, &sign)), digits));
    cpset_free(&e);
    cpset_free(&sign);
    return ast_concat(c, (ast_t *[]){ast_opt(c, ast_str(c, "-")), integer, frac, exp}, 4);
}

ast_t *json_object_body(gctx_t *c, uint32_t value_rule)
{
    ast_t *member = ast_seq3(c, json_string_any(c, 0, G_INF), json_sep_colon(c), ast_call(c, value_rule));
    ast_t *members = ast_seq2(c, member, ast_repeat(c, ast_seq2(c, json_sep_comma(c), member), 0, G_INF));
    return ast_seq3(c, ast_str(c, "{"), ast_opt(c, members), ast_str(c, "}"));
}

ast_t *json_value_body(gctx_t *c, uint32_t value_rule)
{
    ast_t *item = ast_call(c, value_rule);
    ast_t *items = ast_seq2(c, item, ast_repeat(c, ast_seq2(c, json_sep_comma(c), item), 0, G_INF));
    ast_t *array = ast_seq3(c, ast_str(c, "["), ast_opt(c, items), ast_str(c, "]"));
    ast_t *alts[] = {json_object_body(c, value_rule), array, json_string_any(c, 0, G_INF), json_number_any(c),
                     ast_str(c, "true"), ast_str(c, "false"), ast_str(c, "null")};
    return ast_alt(c, alts, DI_ARRAY_LEN(alts));
}
