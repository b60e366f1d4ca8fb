/* The strict form of a request schema (see chat_schema.h): recipe reads the schema into a
 * typed model (a "type", else "anyOf", else "$ref") and writes it back, which keeps only the
 * fields that model has, in its order, and closes every object: additionalProperties false,
 * all properties required. */
#include "chat_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *err;
    size_t errlen;
} strict_t;

static json_t *strict_fail(strict_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *strict_fail(strict_t *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
    return NULL;
}

/* An optional field (null counts as absent) copied when ok(value) holds. */
static bool copy_field(strict_t *s, json_t *out, const json_t *in, const char *key, int (*ok)(const json_t *),
                       const char *what) {
    const json_t *v = json_object_get(in, key);
    if (!v || json_is_null(v)) return true;
    if (!ok(v)) {
        strict_fail(s, "'%s' must be %s", key, what);
        return false;
    }
    json_object_set(out, key, (json_t *)v);
    return true;
}

static int is_string(const json_t *v) { return json_is_string(v); }
static int is_number(const json_t *v) { return json_is_number(v); }
static int is_integer(const json_t *v) { return json_is_integer(v); }

static int is_format(const json_t *v) {
    static const char *const formats[] = {"email", "hostname", "ipv4", "ipv6", "uuid"};
    if (!json_is_string(v)) return 0;
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(json_string_value(v), formats[i])) return 1;
    return 0;
}

static int is_string_list(const json_t *v) {
    if (!json_is_array(v)) return 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i))) return 0;
    return 1;
}

static int is_scalar_type_list(const json_t *v) {
    static const char *const types[] = {"string", "number", "integer", "boolean", "null"};
    if (!json_is_array(v)) return 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *t = json_array_get(v, i);
        size_t k = 0;
        while (k < sizeof types / sizeof *types && !(json_is_string(t) && !strcmp(json_string_value(t), types[k]))) k++;
        if (k == sizeof types / sizeof *types) return 0;
    }
    return 1;
}

static json_t *strict_schema(strict_t *s, const json_t *in, bool empty_object_ok);

static json_t *strict_object(strict_t *s, const json_t *in, json_t *out, bool empty_ok) {
    const json_t *props = json_object_get(in, "properties"), *req = json_object_get(in, "required");
    const json_t *extra = json_object_get(in, "additionalProperties");
    if (props && !json_is_null(props) && !json_is_object(props)) return strict_fail(s, "'properties' must be an object");
    if (!empty_ok && !json_object_size(props)) return strict_fail(s, "an object with no properties is not allowed");
    if (extra && !json_is_null(extra)) {
        if (!json_is_boolean(extra)) return strict_fail(s, "'additionalProperties' must be a boolean");
        if (json_is_true(extra)) return strict_fail(s, "additionalProperties should not be true");
    }
    json_t *out_props = json_object(), *out_req = json_array();
    json_object_set_new(out, "properties", out_props);
    json_object_set_new(out, "additionalProperties", json_false());
    json_object_set_new(out, "required", out_req);
    const char *key;
    json_t *item;
    json_object_foreach((json_t *)props, key, item) {
        json_t *p = strict_schema(s, item, false);
        if (!p) return NULL;
        json_object_set_new(out_props, key, p);
        json_array_append_new(out_req, json_string(key));
    }
    if (req && !json_is_null(req)) {
        if (!is_string_list(req)) return strict_fail(s, "'required' must be a list of strings");
        for (size_t i = 0; i < json_array_size(req); i++) {
            const char *name = json_string_value(json_array_get(req, i));
            for (size_t j = 0; j < i; j++)
                if (!strcmp(name, json_string_value(json_array_get(req, j))))
                    return strict_fail(s, "duplicate required property '%s'", name);
            if (!json_object_get(props, name)) return strict_fail(s, "required property '%s' not found in object", name);
        }
        if (json_array_size(req) != json_object_size(props))
            return strict_fail(s, "required properties must match all properties in the object");
    }
    return out;
}

static bool strict_number(strict_t *s, json_t *out, const json_t *in, bool integer) {
    static const char *const fields[] = {"const", "default", "minimum", "maximum", "exclusiveMinimum",
                                         "exclusiveMaximum", "multipleOf"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!copy_field(s, out, in, fields[i], integer ? is_integer : is_number, integer ? "an integer" : "a number"))
            return false;
    return true;
}

static json_t *strict_typed(strict_t *s, const json_t *in, const json_t *type, bool empty_object_ok) {
    json_t *out = json_object();
    json_object_set(out, "type", (json_t *)type);
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    bool array = !strcmp(t, "array"), object = !strcmp(t, "object");
    bool ok = true;
    if (json_is_array(type)) {
        if (!is_scalar_type_list(type)) {
            strict_fail(s, "a list of types may only name string, number, integer, boolean or null");
            ok = false;
        }
    } else if (!json_is_string(type)) {
        strict_fail(s, "'type' must be a string or a list of strings");
        ok = false;
    } else if (!array && !object && strcmp(t, "string") && strcmp(t, "number") && strcmp(t, "integer") &&
               strcmp(t, "boolean") && strcmp(t, "null")) {
        strict_fail(s, "unknown type '%s'", t);
        ok = false;
    }
    /* The typed model writes the description after the members of arrays and objects. */
    if (ok && !array && !object) ok = copy_field(s, out, in, "description", is_string, "a string");
    if (ok && !strcmp(t, "string"))
        ok = copy_field(s, out, in, "pattern", is_string, "a string") &&
             copy_field(s, out, in, "format", is_format, "one of email, hostname, ipv4, ipv6, uuid") &&
             copy_field(s, out, in, "enum", is_string_list, "a list of strings");
    if (ok && (!strcmp(t, "number") || !strcmp(t, "integer"))) ok = strict_number(s, out, in, !strcmp(t, "integer"));
    if (ok && array) {
        const json_t *items = json_object_get(in, "items");
        json_t *it = items && !json_is_null(items) ? strict_schema(s, items, false) : strict_fail(s, "an array needs 'items'");
        ok = it != NULL;
        if (it) json_object_set_new(out, "items", it);
    }
    if (ok && object) ok = strict_object(s, in, out, empty_object_ok) != NULL;
    if (ok && (array || object)) ok = copy_field(s, out, in, "description", is_string, "a string");
    if (!ok) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *strict_schema(strict_t *s, const json_t *in, bool empty_object_ok) {
    const json_t *type = json_is_object(in) ? json_object_get(in, "type") : NULL;
    const json_t *any = json_is_object(in) ? json_object_get(in, "anyOf") : NULL;
    const json_t *ref = json_is_object(in) ? json_object_get(in, "$ref") : NULL;
    if (type && !json_is_null(type)) return strict_typed(s, in, type, empty_object_ok);
    if (any && !json_is_null(any)) {
        if (!json_is_array(any)) return strict_fail(s, "'anyOf' must be a list");
        json_t *out = json_object(), *list = json_array();
        json_object_set_new(out, "anyOf", list);
        for (size_t i = 0; i < json_array_size(any); i++) {
            json_t *item = strict_schema(s, json_array_get(any, i), false);
            if (!item) {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(list, item);
        }
        if (!copy_field(s, out, in, "description", is_string, "a string")) {
            json_decref(out);
            return NULL;
        }
        return out;
    }
    if (ref && !json_is_null(ref)) {
        if (!json_is_string(ref)) return strict_fail(s, "'$ref' must be a string");
        return json_pack("{s:O}", "$ref", ref);
    }
    return strict_fail(s, "one of 'type', 'anyOf', '$ref' is required in a strict schema");
}

json_t *chat_schema_strict(const json_t *schema, bool tool_parameters, char *err, size_t errlen) {
    strict_t s = {err, errlen};
    json_t *out = strict_schema(&s, schema, tool_parameters);
    const json_t *type = out ? json_object_get(out, "type") : NULL;
    if (out && !(json_is_string(type) && !strcmp(json_string_value(type), "object"))) {
        json_decref(out);
        return strict_fail(&s, "the top level of the schema must be an object");
    }
    return out;
}
