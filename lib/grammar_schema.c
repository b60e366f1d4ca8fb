/* JSON schema -> rule trees. Everything is inlined into the start rule except schema nodes
 * that contain themselves ($ref cycles), which become rules of their own and are called,
 * and "any JSON value", one shared rule. What a keyword means for the output:
 *
 *   - objects: the properties in the schema's order, each optional one present or not;
 *     additionalProperties absent generates no other property (fewer outputs, all valid),
 *     true or a schema allows more after the declared ones, with other names;
 *   - arrays: prefixItems, then items, counted by minItems/maxItems;
 *   - strings: any characters (every JSON escape allowed), or with pattern/format the
 *     canonical spelling (escapes only where JSON needs them); minLength/maxLength count
 *     code points; maxLength and maxItems above GRAMMAR_MAX_REPEAT act as that limit;
 *   - numbers and integers: see grammar_number.c;
 *   - enum/const: the values in compact form; anyOf: any branch; oneOf: any branch, when
 *     the branches are provably exclusive (else refused); allOf, and $ref with siblings:
 *     merged into one schema (grammar_schema_merge.c), refused where that is not exact.
 *
 * A keyword outside this list is refused by name; annotations are ignored. */
#include "grammar_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- keywords ------------------------------------------------------------------------------ */

typedef enum { KW_USED, KW_IGNORED, KW_UNSUPPORTED } kw_class_t;

static const struct {
    const char *name;
    kw_class_t cls;
} KEYWORDS[] = {
    {"type", KW_USED}, {"enum", KW_USED}, {"const", KW_USED}, {"properties", KW_USED}, {"required", KW_USED},
    {"additionalProperties", KW_USED}, {"items", KW_USED}, {"prefixItems", KW_USED}, {"minItems", KW_USED},
    {"maxItems", KW_USED}, {"minLength", KW_USED}, {"maxLength", KW_USED}, {"pattern", KW_USED}, {"format", KW_USED},
    {"minimum", KW_USED}, {"maximum", KW_USED}, {"exclusiveMinimum", KW_USED}, {"exclusiveMaximum", KW_USED},
    {"anyOf", KW_USED}, {"oneOf", KW_USED}, {"allOf", KW_USED}, {"$ref", KW_USED}, {"uniqueItems", KW_USED},
    /* read only where no properties are listed (else no other property is generated) */
    {"unevaluatedProperties", KW_USED},
    /* containers and annotations: no effect on what validates */
    {"$defs", KW_IGNORED}, {"definitions", KW_IGNORED}, {"title", KW_IGNORED}, {"description", KW_IGNORED},
    {"default", KW_IGNORED}, {"examples", KW_IGNORED}, {"$comment", KW_IGNORED}, {"$schema", KW_IGNORED},
    {"$id", KW_IGNORED}, {"deprecated", KW_IGNORED}, {"readOnly", KW_IGNORED}, {"writeOnly", KW_IGNORED},
    {"contentEncoding", KW_IGNORED}, {"contentMediaType", KW_IGNORED},
    {"not", KW_UNSUPPORTED}, {"if", KW_UNSUPPORTED}, {"then", KW_UNSUPPORTED}, {"else", KW_UNSUPPORTED},
    {"dependentRequired", KW_UNSUPPORTED}, {"dependentSchemas", KW_UNSUPPORTED}, {"dependencies", KW_UNSUPPORTED},
    {"patternProperties", KW_UNSUPPORTED}, {"propertyNames", KW_UNSUPPORTED}, {"minProperties", KW_UNSUPPORTED},
    {"maxProperties", KW_UNSUPPORTED}, {"contains", KW_UNSUPPORTED}, {"minContains", KW_UNSUPPORTED},
    {"maxContains", KW_UNSUPPORTED}, {"multipleOf", KW_UNSUPPORTED}, {"unevaluatedItems", KW_UNSUPPORTED},
    {"additionalItems", KW_UNSUPPORTED}, {"$dynamicRef", KW_UNSUPPORTED}, {"$dynamicAnchor", KW_UNSUPPORTED},
    {"$recursiveRef", KW_UNSUPPORTED}, {"$recursiveAnchor", KW_UNSUPPORTED}, {"$anchor", KW_UNSUPPORTED},
    {"$vocabulary", KW_UNSUPPORTED},
};

static int keyword_class(const char *key)
{
    for (size_t i = 0; i < DI_ARRAY_LEN(KEYWORDS); i++)
        if (!strcmp(KEYWORDS[i].name, key)) return (int)KEYWORDS[i].cls;
    return -1;
}

bool schema_is_annotation(const char *key) { return keyword_class(key) == KW_IGNORED; }

static bool check_keywords(sc_t *s, const json_t *node)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)node, key, val) {
        int cls = keyword_class(key);
        if (cls < 0) return g_fail(s->c, "schema: unknown keyword '%.60s'", key);
        if (cls == KW_UNSUPPORTED) return g_fail(s->c, "schema: keyword '%s' is not supported", key);
        if (!strcmp(key, "uniqueItems") && json_is_true(val))
            return g_fail(s->c, "schema: uniqueItems true is not supported");
        if ((!strcmp(key, "exclusiveMinimum") || !strcmp(key, "exclusiveMaximum")) && json_is_boolean(val))
            return g_fail(s->c, "schema: boolean '%s' (draft 4) is not supported; give the bound as a number", key);
        if (!strcmp(key, "$id") && node != s->root)
            return g_fail(s->c, "schema: '$id' below the root is not supported");
    }
    return true;
}

/* ---- references and rules ------------------------------------------------------------------ */

const json_t *schema_resolve(sc_t *s, const char *ref)
{
    if (ref[0] != '#') {
        g_fail(s->c, "schema: only local references ('#...') are supported, not '%.100s'", ref);
        return NULL;
    }
    const json_t *at = s->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        g_fail(s->c, "schema: anchor references ('%.100s') are not supported", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        char tok[512];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = p[1] == '0' ? '~' : '/', p++;
            else if (ch == '%' && p[1] && p[2]) {
                char hex[3] = {p[1], p[2], 0};
                char *end;
                long v = strtol(hex, &end, 16);
                if (*end == 0) ch = (char)v, p += 2;
            }
            if (n + 1 < sizeof tok) tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(at)) at = json_object_get(at, tok);
        else if (json_is_array(at)) {
            char *end;
            long i = strtol(tok, &end, 10);
            at = *end || i < 0 ? NULL : json_array_get(at, (size_t)i);
        } else at = NULL;
        if (!at) {
            g_fail(s->c, "schema: reference '%.100s' points nowhere", ref);
            return NULL;
        }
    }
    return at;
}

static uint32_t rule_for(sc_t *s, const json_t *node)
{
    for (uint32_t i = 0; i < s->n_rmap; i++)
        if (s->rmap[i].node == node) return s->rmap[i].rule;
    if (s->rules->n_rules >= GRAMMAR_MAX_RULES) {
        g_fail(s->c, "schema: more than %d recursive parts", GRAMMAR_MAX_RULES);
        return G_NONE;
    }
    uint32_t r = rules_add(s->rules);
    s->rmap = xrealloc(s->rmap, (s->n_rmap + 1) * sizeof *s->rmap);
    s->rmap[s->n_rmap++] = (sc_rule_t){node, r};
    return r;
}

ast_t *schema_any_value(sc_t *s)
{
    if (s->any_rule == G_NONE) {
        s->any_rule = rules_add(s->rules);
        s->rules->rules[s->any_rule] = json_value_body(s->c, s->any_rule);
    }
    return ast_call(s->c, s->any_rule);
}

/* ---- numbers of keywords ------------------------------------------------------------------- */

/* A non-negative integer keyword (minLength, ...): def when absent, G_INF for "too large". */
static bool count_kw(sc_t *s, const json_t *node, const char *key, uint32_t def, uint32_t *out)
{
    const json_t *v = json_object_get(node, key);
    *out = def;
    if (!v) return true;
    double x = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (!(x >= 0) || x != floor(x)) /* not through a cast: past 2^63 that is undefined (fuzz_grammar) */
        return g_fail(s->c, "schema: '%s' must be a non-negative integer", key);
    *out = x > 1e9 ? G_INF - 1 : (uint32_t)x;
    return true;
}

/* Lower counts above the repetition limit cannot be generated; upper ones are clamped
 * (every output then still validates). */
static bool count_range(sc_t *s, const json_t *node, const char *min_key, const char *max_key, uint32_t *min, uint32_t *max)
{
    if (!count_kw(s, node, min_key, 0, min) || !count_kw(s, node, max_key, G_INF, max)) return false;
    if (*min > GRAMMAR_MAX_REPEAT)
        return g_fail(s->c, "schema: '%s' %u is above the limit of %d", min_key, *min, GRAMMAR_MAX_REPEAT);
    if (*max != G_INF && *max > GRAMMAR_MAX_REPEAT) *max = GRAMMAR_MAX_REPEAT;
    return true;
}

/* ---- types ----------------------------------------------------------------------------------- */

enum { T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16, T_INTEGER = 32, T_NUMBER = 64, T_ALL = 127 };

static int type_bit(const char *name)
{
    static const char *names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(names[i], name)) return 1 << i;
    return 0;
}

/* The types a node's "type" allows; 0 with an error for a malformed one, T_ALL if absent. */
int schema_types(sc_t *s, const json_t *node)
{
    const json_t *t = json_object_get(node, "type");
    if (!t) return T_ALL;
    int bits = 0;
    if (json_is_string(t)) bits = type_bit(json_string_value(t));
    else if (json_is_array(t)) {
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
            int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
            if (!b) {
                bits = 0;
                break;
            }
            bits |= b;
        }
    }
    if (!bits) {
        char *text = json_dumps(t, JSON_COMPACT | JSON_ENCODE_ANY);
        g_fail(s->c, "schema: 'type' %.80s is not a type name or a list of them", text ? text : "?");
        free(text);
    }
    return bits;
}

int schema_value_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOLEAN;
    case JSON_OBJECT: return T_OBJECT;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_STRING: return T_STRING;
    case JSON_INTEGER: return T_INTEGER | T_NUMBER;
    case JSON_REAL: {
        double x = json_real_value(v);
        return x == floor(x) ? T_INTEGER | T_NUMBER : T_NUMBER; /* not through a cast: past 2^63 it is undefined */
    }
    }
    return 0;
}

/* Without "type", the types the keywords talk about (each alone validates); none: any. */
static int inferred_types(const json_t *node)
{
    static const struct {
        const char *key;
        int type;
    } hints[] = {
        {"properties", T_OBJECT}, {"required", T_OBJECT}, {"additionalProperties", T_OBJECT}, {"unevaluatedProperties", T_OBJECT},
        {"items", T_ARRAY}, {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY}, {"maxItems", T_ARRAY},
        {"minLength", T_STRING}, {"maxLength", T_STRING}, {"pattern", T_STRING}, {"format", T_STRING},
        {"minimum", T_NUMBER}, {"maximum", T_NUMBER}, {"exclusiveMinimum", T_NUMBER}, {"exclusiveMaximum", T_NUMBER},
    };
    int bits = 0;
    for (size_t i = 0; i < DI_ARRAY_LEN(hints); i++)
        if (json_object_get(node, hints[i].key)) bits |= hints[i].type;
    return bits ? bits : T_ALL;
}

/* ---- objects ----------------------------------------------------------------------------------- */

static ast_t *key_then_colon(sc_t *s, const char *name)
{
    json_t *k = json_string(name);
    ast_t *lit = k ? json_literal(s->c, k) : NULL;
    json_decref(k);
    return lit ? ast_seq2(s->c, lit, json_sep_colon(s->c)) : NULL;
}

static bool is_required(const json_t *required, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(required, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), name)) return true;
    return false;
}

/* Keys that are none of names[]: the JSON string of any text except those. */
static ast_t *other_key(sc_t *s, const char **names, uint32_t n)
{
    gctx_t *c = s->c;
    ast_t *any = ast_repeat(c, ast_range(c, 0, G_MAX_CP), 0, G_INF);
    astv_t lits = {0};
    for (uint32_t i = 0; i < n; i++) astv_push(&lits, ast_str(c, names[i]));
    dfa_t *all = dfa_from_ast(c, any), *named = all ? dfa_from_ast(c, ast_alt(c, lits.v, lits.n)) : NULL;
    astv_free(&lits);
    dfa_t *rest = named ? dfa_product(c, all, named, true) : NULL;
    dfa_free(all);
    dfa_free(named);
    if (!rest) return NULL;
    g_own_dfa(c, rest);
    return ast_seq3(c, ast_str(c, "\""), ast_dfa(c, rest, true), ast_str(c, "\""));
}

static ast_t *object_ast(sc_t *s, const json_t *node)
{
    gctx_t *c = s->c;
    const json_t *props = json_object_get(node, "properties"), *req = json_object_get(node, "required");
    const json_t *addl = json_object_get(node, "additionalProperties");
    if (props && !json_is_object(props)) return g_fail(c, "schema: 'properties' must be an object"), NULL;
    if (req && !json_is_array(req)) return g_fail(c, "schema: 'required' must be an array"), NULL;
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return g_fail(c, "schema: 'additionalProperties' must be a schema"), NULL;
    size_t cap = json_object_size(props) + json_array_size(req) + 1;
    ast_t **items = g_alloc(c, cap * sizeof *items);
    bool *required = g_alloc(c, cap * sizeof *required);
    const char **names = g_alloc(c, cap * sizeof *names);
    uint32_t n = 0;
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)props, key, sub) {
        bool req_k = req && is_required(req, key);
        if (json_is_false(sub)) {
            if (req_k) return g_fail(c, "schema: required property '%.60s' has the schema false", key), NULL;
            continue;
        }
        ast_t *k = key_then_colon(s, key), *v = k ? schema_node(s, sub) : NULL;
        if (!v) return NULL;
        required[n] = req_k;
        items[n] = ast_seq2(c, k, v);
        names[n++] = key;
    }
    /* required names the properties do not list: their value is additionalProperties' */
    size_t i;
    json_t *e;
    json_array_foreach((json_t *)req, i, e) {
        if (!json_is_string(e)) return g_fail(c, "schema: 'required' must list strings"), NULL;
        const char *name = json_string_value(e);
        if (props && json_object_get(props, name)) continue;
        bool dup = false;
        for (uint32_t k = 0; k < n; k++) dup |= !strcmp(names[k], name);
        if (dup) continue;
        if (json_is_false(addl)) return g_fail(c, "schema: required property '%.60s' is not allowed by additionalProperties false", name), NULL;
        ast_t *k = key_then_colon(s, name), *v = k ? (addl && !json_is_true(addl) ? schema_node(s, addl) : schema_any_value(s)) : NULL;
        if (!v) return NULL;
        required[n] = true;
        items[n] = ast_seq2(c, k, v);
        names[n++] = name;
    }
    ast_t *rest = NULL;
    /* additionalProperties absent: none generated, unless the schema lists no properties at
     * all ({"type": "object"} means any object); unevaluatedProperties then says what the
     * others may hold */
    if (!addl && !props) addl = json_object_get(node, "unevaluatedProperties");
    if (!addl && !props) addl = json_true();
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return g_fail(c, "schema: 'unevaluatedProperties' must be a schema"), NULL;
    if (addl && !json_is_false(addl)) {
        ast_t *k = other_key(s, names, n);
        ast_t *v = k ? (json_is_true(addl) ? schema_any_value(s) : schema_node(s, addl)) : NULL;
        if (!v) return NULL;
        rest = ast_seq3(c, k, json_sep_colon(c), v);
    }
    ast_t *list = ast_new(c, AST_LIST);
    list->n = n;
    list->kids = g_alloc(c, (n + 2) * sizeof *list->kids);
    if (n) memcpy(list->kids, items, n * sizeof *items);
    list->kids[n] = json_sep_comma(c);
    list->kids[n + 1] = rest;
    list->required = required;
    return ast_seq3(c, ast_str(c, "{"), list, ast_str(c, "}"));
}

/* ---- arrays ------------------------------------------------------------------------------------ */

static ast_t *array_ast(sc_t *s, const json_t *node)
{
    gctx_t *c = s->c;
    const json_t *items = json_object_get(node, "items"), *prefix = json_object_get(node, "prefixItems");
    if (items && json_is_array(items)) return g_fail(c, "schema: 'items' as an array (draft 4-2019) is not supported; use prefixItems"), NULL;
    if (prefix && !json_is_array(prefix)) return g_fail(c, "schema: 'prefixItems' must be an array"), NULL;
    uint32_t min, max;
    if (!count_range(s, node, "minItems", "maxItems", &min, &max)) return NULL;
    uint32_t k = (uint32_t)json_array_size(prefix), p = k < max ? k : max;
    if (p > GRAMMAR_MAX_REPEAT) return g_fail(c, "schema: more than %d prefixItems", GRAMMAR_MAX_REPEAT), NULL;
    /* items after the prefix: none if items is false or the prefix already reaches maxItems */
    uint32_t rest_max = json_is_false(items) || p < k ? 0 : max == G_INF ? G_INF : max - p;
    if (min > p + (rest_max == G_INF ? GRAMMAR_MAX_REPEAT : rest_max)) return ast_fail(c);
    ast_t *item = NULL;
    if (rest_max) item = items && !json_is_true(items) ? schema_node(s, items) : schema_any_value(s);
    if (rest_max && !item) return NULL;
    ast_t **pre = g_alloc(c, (p + 1) * sizeof *pre);
    for (uint32_t i = 0; i < p; i++)
        if (!(pre[i] = schema_node(s, json_array_get(prefix, i)))) return NULL;
    /* tail(i): what follows the first i elements, each element after a separator */
    uint32_t rest_min = min > p ? min - p : 0;
    ast_t *tail = rest_max ? ast_repeat(c, ast_seq2(c, json_sep_comma(c), item), rest_min, rest_max) : ast_empty(c);
    for (uint32_t i = p; i-- > 1;) {
        ast_t *el = ast_seq3(c, json_sep_comma(c), pre[i], tail);
        tail = i < min ? el : ast_or2(c, el, ast_empty(c));
    }
    ast_t *first;
    if (p) first = ast_seq2(c, pre[0], tail);
    else if (rest_max) first = ast_seq2(c, item, ast_repeat(c, ast_seq2(c, json_sep_comma(c), item), rest_min ? rest_min - 1 : 0, rest_max == G_INF ? G_INF : rest_max - 1));
    else first = ast_fail(c);
    ast_t *body = min ? first : ast_opt(c, first);
    return ast_seq3(c, ast_str(c, "["), body, ast_str(c, "]"));
}

/* ---- strings --------------------------------------------------------------------------------- */

static ast_t *any_chars(gctx_t *c, uint32_t min, uint32_t max) { return ast_repeat(c, ast_range(c, 0, G_MAX_CP), min, max); }

/* Patterns for format values (full match, schema dialect). Dates keep to days every month has
 * (or the month's own count); years 1000-9999. */
static const struct {
    const char *name, *regex;
} FORMATS[] = {
#define DATE "[1-9][0-9]{3}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE "T" TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4", "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"},
    {"email", "[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+"},
#undef DATE
#undef TIME
};

static dfa_t *and_dfa(gctx_t *c, dfa_t *acc, ast_t *a)
{
    dfa_t *x = a ? dfa_from_ast(c, a) : NULL;
    if (!acc) return x;
    dfa_t *p = x ? dfa_product(c, acc, x, false) : NULL;
    dfa_free(acc);
    dfa_free(x);
    return p;
}

static ast_t *string_ast(sc_t *s, const json_t *node)
{
    gctx_t *c = s->c;
    uint32_t min, max;
    if (!count_range(s, node, "minLength", "maxLength", &min, &max)) return NULL;
    if (min > max) return ast_fail(c);
    const json_t *pattern = json_object_get(node, "pattern"), *format = json_object_get(node, "format");
    if (pattern && !json_is_string(pattern)) return g_fail(c, "schema: 'pattern' must be a string"), NULL;
    if (format && !json_is_string(format)) return g_fail(c, "schema: 'format' must be a string"), NULL;
    if (!pattern && !format) return json_string_any(c, min, max);
    /* the value's characters: pattern (found anywhere) ∩ format ∩ length; then JSON-escaped */
    dfa_t *v = NULL;
    if (pattern) {
        const char *p = json_string_value(pattern);
        ast_t *re = regex_parse(c, p, strlen(p), REGEX_SCHEMA);
        if (!re) return NULL;
        v = and_dfa(c, NULL, ast_seq3(c, any_chars(c, 0, G_INF), re, any_chars(c, 0, G_INF)));
        if (!v) return NULL;
    }
    if (format) {
        const char *f = json_string_value(format), *re = NULL;
        for (size_t i = 0; i < DI_ARRAY_LEN(FORMATS); i++)
            if (!strcmp(FORMATS[i].name, f)) re = FORMATS[i].regex;
        if (!re) {
            dfa_free(v);
            return g_fail(c, "schema: format '%.40s' is not supported", f), NULL;
        }
        if (!(v = and_dfa(c, v, regex_parse(c, re, strlen(re), REGEX_SCHEMA)))) return NULL;
    }
    if ((min || max != G_INF) && !(v = and_dfa(c, v, any_chars(c, min, max)))) return NULL;
    g_own_dfa(c, v);
    if (dfa_is_empty(v)) return ast_fail(c);
    return ast_seq3(c, ast_str(c, "\""), ast_dfa(c, v, true), ast_str(c, "\""));
}

/* ---- numbers ------------------------------------------------------------------------------------ */

static ast_t *number_ast(sc_t *s, const json_t *node, bool integer)
{
    static const struct {
        const char *key;
        cmp_t op;
    } kw[] = {{"minimum", CMP_GE}, {"exclusiveMinimum", CMP_GT}, {"maximum", CMP_LE}, {"exclusiveMaximum", CMP_LT}};
    num_bound_t b[4];
    uint32_t n = 0;
    for (size_t i = 0; i < DI_ARRAY_LEN(kw); i++) {
        const json_t *v = json_object_get(node, kw[i].key);
        if (!v) continue;
        if (!json_is_number(v)) return g_fail(s->c, "schema: '%s' must be a number", kw[i].key), NULL;
        b[n++] = (num_bound_t){v, kw[i].op};
    }
    return integer ? json_integer_ast(s->c, b, n) : json_number_ast(s->c, b, n);
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

static ast_t *enum_ast(sc_t *s, const json_t *node)
{
    const json_t *en = json_object_get(node, "enum"), *cn = json_object_get(node, "const");
    if (en && !json_is_array(en)) return g_fail(s->c, "schema: 'enum' must be an array"), NULL;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)node, key, val) {
        if (!strcmp(key, "enum") || !strcmp(key, "const") || !strcmp(key, "type") || schema_is_annotation(key)) continue;
        return g_fail(s->c, "schema: enum/const together with '%s' is not supported", key), NULL;
    }
    int types = schema_types(s, node);
    if (!types) return NULL;
    astv_t alts = {0};
    size_t n = en ? json_array_size(en) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (en && cn && !schema_values_equal(v, cn)) continue;
        if (!(schema_value_type(v) & types)) continue;
        ast_t *a = json_literal(s->c, v);
        if (!a) break;
        astv_push(&alts, a);
    }
    ast_t *a = s->c->failed ? NULL : ast_alt(s->c, alts.v, alts.n);
    astv_free(&alts);
    return a;
}

static ast_t *typed_ast(sc_t *s, const json_t *node)
{
    int types = json_object_get(node, "type") ? schema_types(s, node) : inferred_types(node);
    if (!types) return NULL;
    if (types == T_ALL) return schema_any_value(s);
    if (types & T_NUMBER) types &= ~T_INTEGER;
    astv_t alts = {0};
    ast_t *a = NULL;
    for (int bit = 1; bit <= T_NUMBER; bit <<= 1) {
        if (!(types & bit)) continue;
        switch (bit) {
        case T_NULL: a = ast_str(s->c, "null"); break;
        case T_BOOLEAN: a = ast_or2(s->c, ast_str(s->c, "true"), ast_str(s->c, "false")); break;
        case T_OBJECT: a = object_ast(s, node); break;
        case T_ARRAY: a = array_ast(s, node); break;
        case T_STRING: a = string_ast(s, node); break;
        case T_INTEGER: a = number_ast(s, node, true); break;
        case T_NUMBER: a = number_ast(s, node, false); break;
        }
        if (!a) break;
        astv_push(&alts, a);
    }
    a = s->c->failed ? NULL : ast_alt(s->c, alts.v, alts.n);
    astv_free(&alts);
    return a;
}

static bool has_constraints(const json_t *node, const char *except)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)node, key, val) if (strcmp(key, except) && !schema_is_annotation(key)) return true;
    return false;
}

static ast_t *alternatives(sc_t *s, const json_t *node, const char *kw)
{
    const json_t *list = json_object_get(node, kw);
    if (!json_is_array(list) || !json_array_size(list)) return g_fail(s->c, "schema: '%s' must be a non-empty array", kw), NULL;
    json_t *rest = schema_without(node, kw);
    bool merge = has_constraints(rest, "");
    json_t *branches = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(list, i, b) {
        json_t *br = merge ? schema_merge(s, rest, b) : json_incref(b);
        if (!br) break;
        json_array_append_new(branches, br);
    }
    json_array_append_new(s->keep, rest);
    json_array_append_new(s->keep, branches);
    if (s->c->failed) return NULL;
    if (!strcmp(kw, "oneOf") && !schema_check_exclusive(s, branches)) return NULL;
    astv_t alts = {0};
    json_array_foreach(branches, i, b) {
        ast_t *a = schema_node(s, b);
        if (!a) break;
        astv_push(&alts, a);
    }
    ast_t *a = s->c->failed ? NULL : ast_alt(s->c, alts.v, alts.n);
    astv_free(&alts);
    return a;
}

static ast_t *body_ast(sc_t *s, const json_t *node)
{
    if (!check_keywords(s, node)) return NULL;
    const json_t *ref = json_object_get(node, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return g_fail(s->c, "schema: '$ref' must be a string"), NULL;
        const json_t *target = schema_resolve(s, json_string_value(ref));
        if (!target) return NULL;
        if (!has_constraints(node, "$ref")) return schema_node(s, target);
        json_t *rest = schema_without(node, "$ref");
        json_t *m = schema_merge(s, target, rest);
        json_array_append_new(s->keep, rest);
        if (!m) return NULL;
        json_array_append_new(s->keep, m);
        return schema_node(s, m);
    }
    if (json_object_get(node, "allOf")) {
        json_t *m = schema_flatten_all_of(s, node);
        if (!m) return NULL;
        json_array_append_new(s->keep, m);
        return schema_node(s, m);
    }
    bool any = json_object_get(node, "anyOf") != NULL, one = json_object_get(node, "oneOf") != NULL;
    if (any && one) return g_fail(s->c, "schema: anyOf and oneOf in one schema are not supported"), NULL;
    if (any || one) return alternatives(s, node, any ? "anyOf" : "oneOf");
    if (json_object_get(node, "enum") || json_object_get(node, "const")) return enum_ast(s, node);
    return typed_ast(s, node);
}

ast_t *schema_node(sc_t *s, const json_t *node)
{
    if (s->c->failed) return NULL;
    if (json_is_true(node)) return schema_any_value(s);
    if (json_is_false(node)) return ast_fail(s->c);
    if (!json_is_object(node)) return g_fail(s->c, "schema: a schema must be an object or a boolean"), NULL;
    for (uint32_t i = 0; i < s->depth; i++)
        if (s->stack[i] == node) {
            uint32_t r = rule_for(s, node);
            return r == G_NONE ? NULL : ast_call(s->c, r);
        }
    if (s->depth == SCHEMA_MAX_DEPTH) return g_fail(s->c, "schema: nested too deeply (more than %d levels)", SCHEMA_MAX_DEPTH), NULL;
    s->stack[s->depth++] = node;
    ast_t *a = body_ast(s, node);
    s->depth--;
    return a;
}

bool schema_compile(gctx_t *c, const char *text, rules_t *out, char **canonical)
{
    size_t len = strlen(text);
    if (len > GRAMMAR_MAX_TEXT) return g_fail(c, "schema: %zu bytes exceed the limit of %u", len, GRAMMAR_MAX_TEXT);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return g_fail(c, "schema: invalid JSON: %s", jerr.text);
    sc_t s = {.c = c, .root = root, .rules = out, .any_rule = G_NONE, .keep = json_array()};
    uint32_t start = rules_add(out);
    out->rules[start] = schema_node(&s, root);
    /* bodies of the recursive nodes, each compiled with only itself being expanded */
    for (uint32_t i = 0; i < s.n_rmap && !c->failed; i++) {
        uint32_t r = s.rmap[i].rule;
        out->rules[r] = schema_node(&s, s.rmap[i].node);
    }
    if (!c->failed) *canonical = json_dumps(root, JSON_COMPACT | JSON_ENCODE_ANY);
    free(s.rmap);
    json_decref(s.keep);
    json_decref(root);
    return !c->failed;
}
