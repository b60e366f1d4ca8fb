/* Schema algebra for the JSON-schema front end: allOf (and $ref with siblings) merged into
 * one equivalent schema, where that can be done exactly, and the proof obligation of
 * oneOf: no value may match two branches (the grammar only guarantees "at least one"). */
#include "grammar_schema.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool schema_values_equal(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b)) return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!schema_values_equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            const json_t *w = json_object_get(b, k);
            if (!w || !schema_values_equal(v, w)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

json_t *schema_without(const json_t *node, const char *key)
{
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)node, k, v) if (strcmp(k, key)) json_object_set(o, k, v);
    return o;
}

/* ---- merging ------------------------------------------------------------------------------ */

/* node with its top-level $ref / allOf applied (new reference). */
static json_t *expand(sc_t *s, const json_t *node)
{
    if (!json_is_object(node)) return json_incref((json_t *)node);
    const json_t *ref = json_object_get(node, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return g_fail(s->c, "schema: '$ref' must be a string"), NULL;
        const json_t *target = schema_resolve(s, json_string_value(ref));
        if (!target) return NULL;
        json_t *rest = schema_without(node, "$ref");
        json_t *m = schema_merge(s, target, rest);
        json_decref(rest);
        return m;
    }
    if (json_object_get(node, "allOf")) return schema_flatten_all_of(s, node);
    return json_incref((json_t *)node);
}

static json_t *type_names(int bits)
{
    static const char *names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
    json_t *a = json_array();
    for (int i = 0; i < 7; i++)
        if (bits & (1 << i)) json_array_append_new(a, json_string(names[i]));
    return a;
}

enum { T_INTEGER = 32, T_NUMBER = 64 };

/* "type" as bits where number includes integer. */
static int type_closure(int bits) { return bits & T_NUMBER ? bits | T_INTEGER : bits; }

static bool merge_types(sc_t *s, const json_t *a, const json_t *b, json_t *out)
{
    int ta = schema_types(s, a), tb = schema_types(s, b);
    if (!ta || !tb) return false;
    int both = type_closure(ta) & type_closure(tb);
    /* number ∩ integer = integer: drop number unless both allowed it */
    if (!((ta & T_NUMBER) && (tb & T_NUMBER))) both &= ~T_NUMBER;
    if (!both) return false; /* no type both allow: the caller makes it false */
    json_object_set_new(out, "type", type_names(both));
    return true;
}

static json_t *values_of(const json_t *node)
{
    const json_t *en = json_object_get(node, "enum"), *cn = json_object_get(node, "const");
    if (cn) {
        json_t *a = json_array();
        json_array_append(a, (json_t *)cn);
        return a;
    }
    return json_is_array(en) ? json_incref((json_t *)en) : NULL;
}

static bool in_values(const json_t *list, const json_t *v)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (schema_values_equal(json_array_get(list, i), v)) return true;
    return false;
}

static void merge_values(const json_t *a, const json_t *b, json_t *out)
{
    json_t *va = values_of(a), *vb = values_of(b), *both = json_array();
    if (!va || !vb) {
        json_t *one = va ? va : vb;
        json_object_set(out, "enum", one);
        json_decref(va);
        json_decref(vb);
        json_decref(both);
        return;
    }
    for (size_t i = 0; i < json_array_size(va); i++)
        if (in_values(vb, json_array_get(va, i))) json_array_append(both, json_array_get(va, i));
    json_object_set_new(out, "enum", both);
    json_decref(va);
    json_decref(vb);
}

static json_t *all_of2(const json_t *x, const json_t *y)
{
    json_t *o = json_object(), *list = json_array();
    json_array_append(list, (json_t *)x);
    json_array_append(list, (json_t *)y);
    json_object_set_new(o, "allOf", list);
    return o;
}

/* What node says about property `name` (validation semantics): its schema (borrowed),
 * json_true() if unconstrained, NULL if the name is not allowed. */
static const json_t *property_rule(const json_t *node, const char *name)
{
    const json_t *props = json_object_get(node, "properties"), *p = props ? json_object_get(props, name) : NULL;
    if (p) return p;
    const json_t *addl = json_object_get(node, "additionalProperties");
    if (!addl) return json_true();
    return json_is_false(addl) ? NULL : addl;
}

static void merge_objects(const json_t *a, const json_t *b, json_t *out)
{
    json_t *props = json_object();
    const json_t *sides[2] = {a, b};
    for (int side = 0; side < 2; side++) {
        const char *name;
        json_t *sub;
        json_object_foreach(json_object_get(sides[side], "properties"), name, sub) {
            if (json_object_get(props, name)) continue;
            const json_t *ra = property_rule(a, name), *rb = property_rule(b, name);
            if (!ra || !rb) {
                json_object_set_new(props, name, json_false());
                continue;
            }
            if (json_is_true(ra)) json_object_set(props, name, (json_t *)rb);
            else if (json_is_true(rb)) json_object_set(props, name, (json_t *)ra);
            else json_object_set_new(props, name, all_of2(ra, rb));
        }
    }
    if (json_object_size(props)) json_object_set(out, "properties", props);
    json_decref(props);
    const json_t *xa = json_object_get(a, "additionalProperties"), *xb = json_object_get(b, "additionalProperties");
    if (json_is_false(xa) || json_is_false(xb)) json_object_set_new(out, "additionalProperties", json_false());
    else if (xa && xb) json_object_set_new(out, "additionalProperties", all_of2(xa, xb));
    else if (xa || xb) json_object_set(out, "additionalProperties", (json_t *)(xa ? xa : xb));
    json_t *req = json_array();
    for (int side = 0; side < 2; side++) {
        const json_t *r = json_object_get(sides[side], "required");
        for (size_t i = 0; i < json_array_size(r); i++)
            if (!in_values(req, json_array_get(r, i))) json_array_append(req, json_array_get(r, i));
    }
    if (json_array_size(req)) json_object_set(out, "required", req);
    json_decref(req);
}

static bool is_object_key(const char *k)
{
    return !strcmp(k, "properties") || !strcmp(k, "additionalProperties") || !strcmp(k, "required");
}

static bool is_value_key(const char *k) { return !strcmp(k, "enum") || !strcmp(k, "const"); }

/* Keywords where the tighter of two values wins: lower bounds take the larger. */
static int bound_kind(const char *k)
{
    static const char *lower[] = {"minLength", "minItems", "minimum", "exclusiveMinimum"};
    static const char *upper[] = {"maxLength", "maxItems", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        if (!strcmp(k, lower[i])) return 1;
        if (!strcmp(k, upper[i])) return -1;
    }
    return 0;
}

json_t *schema_merge(sc_t *s, const json_t *a0, const json_t *b0)
{
    if (json_is_false(a0) || json_is_false(b0)) return json_false();
    if (json_is_true(a0)) return json_incref((json_t *)b0);
    if (json_is_true(b0)) return json_incref((json_t *)a0);
    if (!json_is_object(a0) || !json_is_object(b0)) return g_fail(s->c, "schema: a schema must be an object or a boolean"), NULL;
    if (++s->merge_depth > SCHEMA_MAX_DEPTH) {
        s->merge_depth--;
        return g_fail(s->c, "schema: allOf/$ref merging nests too deeply (a reference cycle?)"), NULL;
    }
    json_t *a = expand(s, a0), *b = a ? expand(s, b0) : NULL, *out = NULL;
    if (!a || !b) goto done;
    if (!json_is_object(a) || !json_is_object(b)) {
        out = schema_merge(s, a, b);
        goto done;
    }
    out = json_object();
    bool values = false, objects = false;
    const json_t *sides[2] = {a, b};
    for (int side = 0; side < 2 && !s->c->failed; side++) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)sides[side], k, v) {
            if (schema_is_annotation(k) || json_object_get(out, k)) continue;
            const json_t *w = json_object_get(sides[!side], k);
            if (!strcmp(k, "type")) {
                if (w && !merge_types(s, a, b, out)) {
                    if (s->c->failed) break;
                    json_decref(out);
                    out = json_false();
                    goto done;
                }
                if (!w) json_object_set(out, k, v);
            } else if (is_value_key(k)) {
                if (!values) merge_values(a, b, out), values = true;
            } else if (is_object_key(k)) {
                if (!objects) merge_objects(a, b, out), objects = true;
            } else if (!w || schema_values_equal(v, w)) {
                json_object_set(out, k, v);
            } else if (bound_kind(k)) {
                double x = json_number_value(v), y = json_number_value(w);
                bool first = bound_kind(k) > 0 ? x >= y : x <= y;
                json_object_set(out, k, first ? v : (json_t *)w);
            } else if (!strcmp(k, "items")) {
                json_object_set_new(out, k, all_of2(v, w));
            } else {
                g_fail(s->c, "schema: allOf combining two different '%.40s' is not supported", k);
                break;
            }
        }
    }
done:
    s->merge_depth--;
    json_decref(a);
    json_decref(b);
    if (s->c->failed) {
        json_decref(out);
        return NULL;
    }
    return out;
}

json_t *schema_flatten_all_of(sc_t *s, const json_t *node)
{
    const json_t *list = json_object_get(node, "allOf");
    if (!json_is_array(list) || !json_array_size(list)) return g_fail(s->c, "schema: 'allOf' must be a non-empty array"), NULL;
    json_t *acc = schema_without(node, "allOf");
    for (size_t i = 0; i < json_array_size(list) && acc; i++) {
        json_t *m = schema_merge(s, acc, json_array_get(list, i));
        json_decref(acc);
        acc = m;
    }
    return acc;
}

/* ---- oneOf --------------------------------------------------------------------------------- */

/* node with plain $ref chains followed (borrowed). */
static const json_t *follow_refs(sc_t *s, const json_t *node)
{
    for (int i = 0; i < 32 && json_is_object(node); i++) {
        const json_t *ref = json_object_get(node, "$ref");
        if (!json_is_string(ref) || json_object_size(node) != 1) break;
        const json_t *t = schema_resolve(s, json_string_value(ref));
        if (!t) break;
        node = t;
    }
    return node;
}

/* Types a schema can possibly accept (number includes integer); all if unsure. */
static int possible_types(sc_t *s, const json_t *node, int depth)
{
    node = follow_refs(s, node);
    if (json_is_false(node)) return 0;
    if (!json_is_object(node) || depth > 16) return 127;
    int bits = 127;
    if (json_object_get(node, "type")) bits = type_closure(schema_types(s, node));
    json_t *vals = values_of(node);
    if (vals) {
        int vb = 0;
        for (size_t i = 0; i < json_array_size(vals); i++) vb |= schema_value_type(json_array_get(vals, i));
        bits &= vb;
        json_decref(vals);
    }
    static const char *alts[] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const json_t *list = json_object_get(node, alts[k]);
        if (!json_is_array(list)) continue;
        int ub = 0;
        for (size_t i = 0; i < json_array_size(list); i++) ub |= possible_types(s, json_array_get(list, i), depth + 1);
        bits &= ub;
    }
    const json_t *all = json_object_get(node, "allOf");
    for (size_t i = 0; json_is_array(all) && i < json_array_size(all); i++) bits &= possible_types(s, json_array_get(all, i), depth + 1);
    return bits;
}

static bool values_disjoint(const json_t *va, const json_t *vb)
{
    for (size_t i = 0; i < json_array_size(va); i++)
        if (in_values(vb, json_array_get(va, i))) return false;
    return true;
}

/* A property both require whose allowed values (const/enum) do not meet. */
static bool discriminated(sc_t *s, const json_t *a, const json_t *b)
{
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
    for (size_t i = 0; i < json_array_size(ra); i++) {
        const json_t *name = json_array_get(ra, i);
        if (!json_is_string(name) || !in_values(rb, name)) continue;
        const json_t *sa = pa ? json_object_get(pa, json_string_value(name)) : NULL;
        const json_t *sb = pb ? json_object_get(pb, json_string_value(name)) : NULL;
        if (!sa || !sb) continue;
        json_t *va = values_of(follow_refs(s, sa)), *vb = values_of(follow_refs(s, sb));
        bool disjoint = va && vb && values_disjoint(va, vb);
        json_decref(va);
        json_decref(vb);
        if (disjoint) return true;
    }
    return false;
}

static bool exclusive(sc_t *s, const json_t *a, const json_t *b)
{
    if (!(possible_types(s, a, 0) & possible_types(s, b, 0))) return true;
    a = follow_refs(s, a);
    b = follow_refs(s, b);
    if (!json_is_object(a) || !json_is_object(b)) return false;
    json_t *va = values_of(a), *vb = values_of(b);
    bool disjoint = va && vb && values_disjoint(va, vb);
    json_decref(va);
    json_decref(vb);
    return disjoint || discriminated(s, a, b);
}

bool schema_check_exclusive(sc_t *s, const json_t *branches)
{
    size_t n = json_array_size(branches);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            if (exclusive(s, json_array_get(branches, i), json_array_get(branches, j))) continue;
            if (s->c->failed) return false;
            return g_fail(s->c, "schema: oneOf branches %zu and %zu could both match one value (only provably "
                                "exclusive branches are supported: different types, disjoint const/enum, or a "
                                "required property with disjoint const/enum); use anyOf",
                          i + 1, j + 1);
        }
    return true;
}
