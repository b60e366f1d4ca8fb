/* JSON Schema validity for request schemas (see chat_schema.h): the keywords of the JSON Schema meta-schema (draft 2020-12, with the older
 * drafts' array form of "items" and draft-04's boolean exclusive bounds when $schema names
 * them) must have the right types, patterns must compile, and local $ref pointers and
 * anchors must exist. Remote references cannot be resolved: they are errors, as in recipe. */
#include "chat_schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *err;
    size_t errlen;
    const json_t *root;
    int draft; /* 4, 6, 7, 2019 or 2020 */
} check_t;

static bool bad(check_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool bad(check_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return false;
}

static bool is_schema_value(const json_t *v) { return json_is_object(v) || json_is_boolean(v); }

static bool regex_ok(const json_t *v) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)json_string_value(v), json_string_length(v),
                                   PCRE2_UTF | PCRE2_ALT_BSUX, &code, &off, NULL);
    if (!re) return false;
    pcre2_code_free(re);
    return true;
}

/* Finds the value a JSON pointer (RFC 6901, '/'-separated, ~0 ~1, %-escapes) names. */
static const json_t *resolve_pointer(const json_t *root, const char *ptr) {
    const json_t *at = root;
    while (*ptr == '/') {
        ptr++;
        char token[512];
        size_t n = 0;
        for (; *ptr && *ptr != '/'; ptr++) {
            char ch = *ptr;
            if (ch == '~' && (ptr[1] == '0' || ptr[1] == '1')) ch = *++ptr == '0' ? '~' : '/';
            else if (ch == '%' && ptr[1] && ptr[2]) {
                char hex[3] = {ptr[1], ptr[2], 0};
                char *end;
                long b = strtol(hex, &end, 16);
                if (*end) return NULL;
                ch = (char)b;
                ptr += 2;
            }
            if (n + 1 >= sizeof token) return NULL;
            token[n++] = ch;
        }
        token[n] = 0;
        if (json_is_object(at)) {
            at = json_object_get(at, token);
        } else if (json_is_array(at)) {
            char *end;
            unsigned long i = strtoul(token, &end, 10);
            at = *token && !*end ? json_array_get(at, i) : NULL;
        } else {
            at = NULL;
        }
        if (!at) return NULL;
    }
    return *ptr ? NULL : at;
}

static bool has_anchor(const json_t *v, const char *name) {
    if (json_is_object(v)) {
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)v, key, item) {
            if ((!strcmp(key, "$anchor") || !strcmp(key, "$dynamicAnchor")) && json_is_string(item) &&
                !strcmp(json_string_value(item), name))
                return true;
            if (has_anchor(item, name)) return true;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (has_anchor(json_array_get(v, i), name)) return true;
    }
    return false;
}

/* The one remote schema a reference may name: the schema's own meta-schema, whole. */
static bool is_own_meta_schema(const check_t *c, const char *ref) {
    static const struct {
        int draft;
        const char *uri;
    } canonical[] = {
        {2020, "https://json-schema.org/draft/2020-12/schema"}, {2019, "https://json-schema.org/draft/2019-09/schema"},
        {7, "http://json-schema.org/draft-07/schema"}, {6, "http://json-schema.org/draft-06/schema"},
        {4, "http://json-schema.org/draft-04/schema"},
    };
    size_t n = strcspn(ref, "#");
    if (ref[n] == '#' && ref[n + 1]) return false;
    for (size_t i = 0; i < sizeof canonical / sizeof *canonical; i++)
        if (canonical[i].draft == c->draft && strlen(canonical[i].uri) == n && !strncmp(ref, canonical[i].uri, n))
            return true;
    return false;
}

static bool ref_ok(check_t *c, const json_t *v) {
    const char *ref = json_string_value(v);
    if (*ref != '#') {
        if (!*ref || is_own_meta_schema(c, ref)) return true;
        return bad(c, "reference '%s' cannot be resolved (remote schemas are not fetched)", ref);
    }
    if (!ref[1] || ref[1] == '/') {
        if (!resolve_pointer(c->root, ref + 1)) return bad(c, "pointer '%s' does not exist", ref + 1);
        return true;
    }
    if (!has_anchor(c->root, ref + 1)) return bad(c, "anchor '%s' does not exist", ref + 1);
    return true;
}

static bool check_schema(check_t *c, const json_t *v);

static bool schema_map(check_t *c, const json_t *v, const char *key) {
    if (!json_is_object(v)) return bad(c, "'%s' must be an object", key);
    const char *k;
    json_t *item;
    json_object_foreach((json_t *)v, k, item) if (!check_schema(c, item)) return false;
    return true;
}

static bool schema_list(check_t *c, const json_t *v, const char *key) {
    if (!json_is_array(v)) return bad(c, "'%s' must be an array", key);
    if (!json_array_size(v)) return bad(c, "'%s' must not be empty", key);
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!check_schema(c, json_array_get(v, i))) return false;
    return true;
}

static bool unique_strings(check_t *c, const json_t *v, const char *key) {
    if (!json_is_array(v)) return bad(c, "'%s' must be an array", key);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) return bad(c, "'%s' must hold strings", key);
        for (size_t j = 0; j < i; j++)
            if (json_equal(s, json_array_get(v, j))) return bad(c, "'%s' has non-unique elements", key);
    }
    return true;
}

static bool simple_type(const json_t *v) {
    static const char *const types[] = {"array", "boolean", "integer", "null", "number", "object", "string"};
    if (!json_is_string(v)) return false;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(json_string_value(v), types[i])) return true;
    return false;
}

static bool type_ok(check_t *c, const json_t *v) {
    if (simple_type(v)) return true;
    if (json_is_array(v) && json_array_size(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (!simple_type(json_array_get(v, i))) return bad(c, "'type' names an unknown type");
            for (size_t j = 0; j < i; j++)
                if (json_equal(json_array_get(v, i), json_array_get(v, j))) return bad(c, "'type' repeats a type");
        }
        return true;
    }
    return bad(c, "'type' must be a type name or a non-empty list of them");
}

/* $id: a URI reference without a fragment (an empty trailing '#' is allowed). */
static bool id_ok(const char *s) {
    static const char allowed[] = "-._~:/?#[]@!$&'()*+,;=%";
    const char *hash = strchr(s, '#');
    if (hash && hash[1]) return false;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr(allowed, *s)))
            return false;
    return true;
}

static bool anchor_ok(const char *s) {
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr("-._", *s)))
            return false;
    return true;
}

/* How each keyword's value is checked. */
typedef enum { K_STRING, K_NUMBER, K_POSITIVE, K_COUNT, K_BOOL, K_ARRAY, K_OBJECT, K_SCHEMA, K_SCHEMA_MAP,
               K_SCHEMA_LIST, K_UNIQUE_STRINGS, K_TYPE, K_PATTERN, K_REF, K_ANCHOR, K_ITEMS, K_EXCLUSIVE,
               K_DEPENDENCIES, K_DEPENDENT_REQUIRED, K_PATTERN_PROPERTIES, K_VOCABULARY, K_ID } kind_t;

static const struct {
    const char *key;
    kind_t kind;
} KEYWORDS[] = {
    {"$id", K_ID}, {"$schema", K_STRING}, {"$comment", K_STRING}, {"title", K_STRING}, {"description", K_STRING}, {"format", K_STRING},
    {"contentMediaType", K_STRING}, {"contentEncoding", K_STRING}, {"$recursiveRef", K_STRING},
    {"$ref", K_REF}, {"$dynamicRef", K_REF}, {"$anchor", K_ANCHOR}, {"$dynamicAnchor", K_ANCHOR},
    {"$vocabulary", K_VOCABULARY}, {"type", K_TYPE}, {"enum", K_ARRAY}, {"examples", K_ARRAY},
    {"multipleOf", K_POSITIVE}, {"maximum", K_NUMBER}, {"minimum", K_NUMBER},
    {"exclusiveMaximum", K_EXCLUSIVE}, {"exclusiveMinimum", K_EXCLUSIVE},
    {"maxLength", K_COUNT}, {"minLength", K_COUNT}, {"maxItems", K_COUNT}, {"minItems", K_COUNT},
    {"maxProperties", K_COUNT}, {"minProperties", K_COUNT}, {"maxContains", K_COUNT}, {"minContains", K_COUNT},
    {"uniqueItems", K_BOOL}, {"readOnly", K_BOOL}, {"writeOnly", K_BOOL}, {"deprecated", K_BOOL},
    {"pattern", K_PATTERN}, {"required", K_UNIQUE_STRINGS}, {"dependentRequired", K_DEPENDENT_REQUIRED},
    {"properties", K_SCHEMA_MAP}, {"$defs", K_SCHEMA_MAP}, {"definitions", K_SCHEMA_MAP},
    {"dependentSchemas", K_SCHEMA_MAP}, {"patternProperties", K_PATTERN_PROPERTIES}, {"dependencies", K_DEPENDENCIES},
    {"additionalProperties", K_SCHEMA}, {"propertyNames", K_SCHEMA}, {"contains", K_SCHEMA}, {"not", K_SCHEMA},
    {"if", K_SCHEMA}, {"then", K_SCHEMA}, {"else", K_SCHEMA}, {"unevaluatedItems", K_SCHEMA},
    {"unevaluatedProperties", K_SCHEMA}, {"contentSchema", K_SCHEMA}, {"items", K_ITEMS},
    {"prefixItems", K_SCHEMA_LIST}, {"allOf", K_SCHEMA_LIST}, {"anyOf", K_SCHEMA_LIST}, {"oneOf", K_SCHEMA_LIST},
};

static bool keyword_ok(check_t *c, const json_t *schema, const char *key, kind_t kind, const json_t *v) {
    switch (kind) {
    case K_STRING: return json_is_string(v) || bad(c, "'%s' must be a string", key);
    case K_NUMBER: return json_is_number(v) || bad(c, "'%s' must be a number", key);
    case K_POSITIVE: return (json_is_number(v) && json_number_value(v) > 0) || bad(c, "'%s' must be a number above 0", key);
    case K_COUNT:
        /* integral by floor, not through a cast to an integer type (undefined past 2^63) */
        if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) == floor(json_real_value(v))) return true;
        return (json_is_integer(v) && json_integer_value(v) >= 0) || bad(c, "'%s' must be a non-negative integer", key);
    case K_BOOL: return json_is_boolean(v) || bad(c, "'%s' must be a boolean", key);
    case K_ARRAY: return json_is_array(v) || bad(c, "'%s' must be an array", key);
    case K_OBJECT: return json_is_object(v) || bad(c, "'%s' must be an object", key);
    case K_SCHEMA: return check_schema(c, v);
    case K_SCHEMA_MAP: return schema_map(c, v, key);
    case K_SCHEMA_LIST: return schema_list(c, v, key);
    case K_UNIQUE_STRINGS: return unique_strings(c, v, key);
    case K_TYPE: return type_ok(c, v);
    case K_PATTERN:
        if (!json_is_string(v)) return bad(c, "'%s' must be a string", key);
        return regex_ok(v) || bad(c, "\"%s\" is not a valid regular expression", json_string_value(v));
    case K_REF: return json_is_string(v) ? ref_ok(c, v) : bad(c, "'%s' must be a string", key);
    case K_ID:
        if (!json_is_string(v)) return bad(c, "'%s' must be a string", key);
        return id_ok(json_string_value(v)) || bad(c, "'%s' is not a URI without a fragment", json_string_value(v));
    case K_ANCHOR:
        if (!json_is_string(v)) return bad(c, "'%s' must be a string", key);
        return anchor_ok(json_string_value(v)) || bad(c, "'%s' is not a valid anchor name", json_string_value(v));
    case K_VOCABULARY: {
        if (!json_is_object(v)) return bad(c, "'%s' must be an object", key);
        const char *k;
        json_t *item;
        json_object_foreach((json_t *)v, k, item) if (!json_is_boolean(item)) return bad(c, "'%s' values must be booleans", key);
        return true;
    }
    case K_ITEMS:
        if (json_is_array(v) && c->draft < 2020) {
            for (size_t i = 0; i < json_array_size(v); i++)
                if (!check_schema(c, json_array_get(v, i))) return false;
            return true;
        }
        return check_schema(c, v);
    case K_EXCLUSIVE:
        if (c->draft == 4 && json_is_boolean(v)) {
            const char *bound = !strcmp(key, "exclusiveMaximum") ? "maximum" : "minimum";
            return json_object_get(schema, bound) || bad(c, "'%s' needs '%s' in draft 4", key, bound);
        }
        return json_is_number(v) || bad(c, "'%s' must be a number", key);
    case K_DEPENDENT_REQUIRED: {
        if (!json_is_object(v)) return bad(c, "'%s' must be an object", key);
        const char *k;
        json_t *item;
        json_object_foreach((json_t *)v, k, item) if (!unique_strings(c, item, key)) return false;
        return true;
    }
    case K_DEPENDENCIES: {
        if (!json_is_object(v)) return bad(c, "'%s' must be an object", key);
        const char *k;
        json_t *item;
        json_object_foreach((json_t *)v, k, item) {
            if (json_is_array(item) ? !unique_strings(c, item, key) : !check_schema(c, item))
                return bad(c, "'%s' values must be schemas or lists of property names", key);
        }
        return true;
    }
    case K_PATTERN_PROPERTIES: {
        if (!json_is_object(v)) return bad(c, "'%s' must be an object", key);
        const char *k;
        json_t *item;
        json_object_foreach((json_t *)v, k, item) {
            json_t *pattern = json_string(k);
            bool ok = pattern && regex_ok(pattern);
            json_decref(pattern);
            if (!ok) return bad(c, "\"%s\" is not a valid regular expression", k);
            if (!check_schema(c, item)) return false;
        }
        return true;
    }
    }
    return true;
}

static bool check_schema(check_t *c, const json_t *v) {
    if (!is_schema_value(v)) return bad(c, "a schema must be an object or a boolean");
    if (json_is_boolean(v)) return true;
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof *KEYWORDS; i++) {
        const json_t *item = json_object_get(v, KEYWORDS[i].key);
        if (item && !keyword_ok(c, v, KEYWORDS[i].key, KEYWORDS[i].kind, item)) return false;
    }
    return true;
}

/* The draft a $schema URI names, or 0. The fragment does not matter; a URI that is only a
 * fragment (or empty) names the default draft. */
static int draft_of(const char *uri) {
    static const char *const schemes[] = {"https://", "http://"};
    static const struct {
        const char *path;
        int draft;
    } known[] = {
        {"json-schema.org/draft/2020-12/schema", 2020}, {"json-schema.org/draft/2019-09/schema", 2019},
        {"json-schema.org/draft-07/schema", 7}, {"json-schema.org/draft-06/schema", 6},
        {"json-schema.org/draft-04/schema", 4}, {"json-schema.org/schema", 2020},
    };
    size_t n = strcspn(uri, "#");
    if (!n) return 2020;
    for (size_t s = 0; s < 2; s++) {
        size_t k = strlen(schemes[s]);
        if (n < k || strncmp(uri, schemes[s], k)) continue;
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            if (strlen(known[i].path) == n - k && !strncmp(uri + k, known[i].path, n - k)) return known[i].draft;
    }
    return 0;
}

bool chat_schema_valid(const json_t *schema, char *err, size_t errlen) {
    check_t c = {err, errlen, schema, 2020};
    const json_t *meta = json_is_object(schema) ? json_object_get(schema, "$schema") : NULL;
    if (meta) {
        if (!json_is_string(meta)) return bad(&c, "'$schema' must be a string");
        if (!(c.draft = draft_of(json_string_value(meta)))) return bad(&c, "unknown meta-schema '%s'", json_string_value(meta));
    }
    return check_schema(&c, schema);
}
