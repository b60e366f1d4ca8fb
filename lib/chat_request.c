/* Chat Completions request body -> conversation + inference/parsing options, rejecting the
 * requests recipe's conversion rejects. Field types follow recipe's typed request (a wrong
 * type is an error, null is "absent", unknown fields are ignored). */
#include "chat_conv.h"
#include "chat_json.h"
#include "chat_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS_UPPER 393216 /* recipe's default upper bound, thinking or not */
#define MAX_STOP 16
#define MAX_TOOL_NAME 128

typedef struct {
    char *err;
    size_t errlen;
} ctx_t;

static int fail(ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ctx_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= c->errlen && c->errlen > 1) {
        /* Drop a character cut in half: the message may quote request text. */
        size_t len = c->errlen - 1, lead = len;
        while (lead > 0 && ((unsigned char)c->err[lead - 1] & 0xC0) == 0x80) lead--;
        if (lead > 0) {
            unsigned char b = (unsigned char)c->err[lead - 1];
            size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
            if (len - (lead - 1) < need) c->err[lead - 1] = 0;
        }
    }
    return -1;
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* A field, or NULL when it is absent or null. */
static const json_t *field(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static void set_buf(buf_t *b, const json_t *s) { buf_append(b, json_string_value(s), json_string_length(s)); }
static json_t *json_buf(const buf_t *b) { return json_stringn(b->len ? (const char *)b->data : "", b->len); }

static int want_string(ctx_t *c, const json_t *v, const char *what) {
    return json_is_string(v) ? 0 : fail(c, "%s: expected a string, got %s", what, type_name(v));
}

static int opt_bool(ctx_t *c, const json_t *obj, const char *key, const char *what, bool *out) {
    const json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return fail(c, "%s: expected a boolean, got %s", what, type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* An optional unsigned integer no larger than max (the Rust field's width). 1 if present. */
static int opt_uint(ctx_t *c, const json_t *obj, const char *key, uint64_t max, uint64_t *out) {
    const json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return fail(c, "'%s': expected an integer, got %s", key, type_name(v));
    json_int_t i = json_integer_value(v);
    if (i < 0 || (uint64_t)i > max) return fail(c, "'%s': %lld is out of range", key, (long long)i);
    *out = (uint64_t)i;
    return 1;
}

/* An optional number read as a float32, like recipe's f32 fields. 1 if present. */
static int opt_f32(ctx_t *c, const json_t *obj, const char *key, double *out) {
    const json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return fail(c, "'%s': expected a number, got %s", key, type_name(v));
    *out = (double)(float)json_number_value(v);
    return 1;
}

/* The name an enum value spells: a string, or where recipe's field is an external enum also
 * the map spelling {"name": null}. NULL if it is neither. */
static const char *enum_spelling(const json_t *v, bool map_ok) {
    if (json_is_string(v)) return json_string_value(v);
    if (!map_ok || !json_is_object(v) || json_object_size(v) != 1) return NULL;
    const char *key = json_object_iter_key(json_object_iter((json_t *)v));
    return json_is_null(json_object_get(v, key)) ? key : NULL;
}

static bool is_function_tag(const json_t *type) {
    const char *s = enum_spelling(type, true);
    return s && !strcmp(s, "function");
}

static int enum_value(ctx_t *c, const json_t *v, const char *what, const char *const *names, size_t n, bool map_ok) {
    const char *s = enum_spelling(v, map_ok);
    if (!s) return fail(c, "%s: expected a string, got %s", what, type_name(v));
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return (int)i;
    return fail(c, "%s: unknown value '%s'", what, s);
}

/* ---- messages ---------------------------------------------------------------------------- */

static const char IMAGE_REFUSED[] = "image input is not supported: text-only engine";

/* Message content: a string, or a list of parts whose texts are joined by a blank line. */
static int content_text(ctx_t *c, const json_t *v, size_t index, bool parts_ok, buf_t *out) {
    if (json_is_string(v)) {
        set_buf(out, v);
        return 0;
    }
    if (!parts_ok || !json_is_array(v))
        return fail(c, "messages[%zu].content: expected a string%s, got %s", index, parts_ok ? " or a list" : "",
                    v ? type_name(v) : "nothing");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *part = json_array_get(v, i);
        const json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        if (!json_is_string(type)) return fail(c, "messages[%zu].content[%zu]: expected an object with a string 'type'", index, i);
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) {
            const json_t *text = json_object_get(part, "text");
            if (!json_is_string(text)) return fail(c, "messages[%zu].content[%zu].text: expected a string", index, i);
            if (i) buf_puts(out, "\n\n");
            set_buf(out, text);
        } else if (!strcmp(t, "image_url")) {
            return fail(c, "messages[%zu].content[%zu]: %s", index, i, IMAGE_REFUSED);
        } else if (!strcmp(t, "file")) {
            return fail(c, "messages[%zu].content[%zu]: file content is not supported", index, i);
        } else {
            return fail(c, "messages[%zu].content[%zu]: unknown content type '%s' (expected text)", index, i, t);
        }
    }
    return 0;
}

static int tool_call(ctx_t *c, const json_t *v, size_t index, size_t k, chat_call_t *out) {
    if (!json_is_object(v)) return fail(c, "messages[%zu].tool_calls[%zu]: expected an object", index, k);
    const json_t *id = json_object_get(v, "id"), *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
    if (!id || !type || !fn) return fail(c, "messages[%zu].tool_calls[%zu]: 'id', 'type' and 'function' are required", index, k);
    if (!json_is_string(id)) return fail(c, "messages[%zu].tool_calls[%zu].id: expected a string", index, k);
    if (!is_function_tag(type)) return fail(c, "messages[%zu].tool_calls[%zu].type: expected 'function'", index, k);
    const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_object(fn) || !json_is_string(name) || !json_is_string(args))
        return fail(c, "messages[%zu].tool_calls[%zu].function: needs string 'name' and 'arguments'", index, k);
    /* Arguments that are not JSON are rendered as text, like recipe does; but an integer
     * beyond 64 bits is JSON that jansson cannot hold, and rendering it as text would differ. */
    json_error_t jerr;
    json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    json_decref(parsed);
    if (!parsed && json_error_code(&jerr) == json_error_numeric_overflow)
        return fail(c, "messages[%zu].tool_calls[%zu].function.arguments: %s (integers must fit in 64 bits)", index, k, jerr.text);
    set_buf(&out->id, id);
    set_buf(&out->name, name);
    set_buf(&out->arguments, args);
    return 0;
}

static bool same(const buf_t *a, const buf_t *b) { return a->len == b->len && !memcmp(a->data, b->data, a->len); }

static int assistant_fields(ctx_t *c, const json_t *v, size_t index, chat_msg_t *m) {
    const json_t *content = field(v, "content"), *calls = field(v, "tool_calls"), *reasoning = field(v, "reasoning_content");
    if (!content && !calls) return fail(c, "messages[%zu]: an assistant message needs content or tool_calls", index);
    if (content && json_is_array(content))
        for (size_t i = 0; i < json_array_size(content); i++) {
            const json_t *type = json_object_get(json_array_get(content, i), "type");
            if (json_is_string(type) && !strcmp(json_string_value(type), "image_url"))
                return fail(c, "messages[%zu].content[%zu]: %s", index, i, IMAGE_REFUSED);
        }
    if (content && content_text(c, content, index, true, &m->content)) return -1;
    if (reasoning) {
        if (want_string(c, reasoning, "reasoning_content")) return -1;
        m->has_reasoning = true;
        set_buf(&m->reasoning, reasoning);
    }
    if (opt_bool(c, v, "prefix", "prefix", &m->prefix)) return -1;
    if (!calls) return 0;
    if (!json_is_array(calls)) return fail(c, "messages[%zu].tool_calls: expected a list", index);
    if (!json_array_size(calls)) return fail(c, "messages[%zu].tool_calls: empty list (at least one call is required)", index);
    m->n_calls = json_array_size(calls);
    m->calls = xcalloc(m->n_calls, sizeof *m->calls);
    for (size_t k = 0; k < m->n_calls; k++) {
        if (tool_call(c, json_array_get(calls, k), index, k, &m->calls[k])) return -1;
        for (size_t j = 0; j < k; j++)
            if (same(&m->calls[j].id, &m->calls[k].id))
                return fail(c, "messages[%zu]: duplicate tool_call id '%.*s'", index, (int)m->calls[k].id.len, (const char *)m->calls[k].id.data);
    }
    return 0;
}

static int message(ctx_t *c, const json_t *v, size_t index, chat_msg_t *m) {
    static const char *const roles[] = {"system", "user", "assistant", "tool", "latest_reminder"};
    if (!json_is_object(v)) return fail(c, "messages[%zu]: expected an object", index);
    const json_t *role = json_object_get(v, "role");
    if (!role) return fail(c, "messages[%zu]: missing 'role'", index);
    char what[48];
    snprintf(what, sizeof what, "messages[%zu].role", index);
    int r = enum_value(c, role, what, roles, DI_ARRAY_LEN(roles), false);
    if (r < 0) return -1;
    m->role = (chat_role_t)r;
    const json_t *name = field(v, "name"), *content = json_object_get(v, "content");
    if (m->role != CHAT_TOOL && m->role != CHAT_LATEST_REMINDER && name && want_string(c, name, "name")) return -1;
    switch (m->role) {
    case CHAT_SYSTEM:
    case CHAT_USER: return content_text(c, content, index, true, &m->content);
    case CHAT_LATEST_REMINDER: return content_text(c, content, index, false, &m->content);
    case CHAT_TOOL: {
        const json_t *id = json_object_get(v, "tool_call_id");
        if (!json_is_string(id)) return fail(c, "messages[%zu]: a tool message needs a string 'tool_call_id'", index);
        set_buf(&m->call_id, id);
        return content_text(c, content, index, true, &m->content);
    }
    case CHAT_ASSISTANT: return assistant_fields(c, v, index, m);
    }
    return 0;
}

/* Every call must be answered by the tool messages that follow it, before anything else. */
static int check_tool_answers(ctx_t *c, const chat_conv_t *conv) {
    const chat_msg_t *caller = NULL;
    bool *answered = NULL;
    size_t pending = 0;
    int rc = 0;
    for (size_t i = 0; i <= conv->n_msgs && !rc; i++) {
        const chat_msg_t *m = i < conv->n_msgs ? &conv->msgs[i] : NULL;
        if (m && m->role == CHAT_TOOL) {
            if (!pending) {
                rc = fail(c, "messages[%zu]: a tool message must answer a call of the preceding assistant message", i);
                break;
            }
            size_t k = 0;
            while (k < caller->n_calls && (answered[k] || !same(&caller->calls[k].id, &m->call_id))) k++;
            if (k == caller->n_calls) {
                rc = fail(c, "messages[%zu]: tool_call_id '%.*s' answers no pending call", i, (int)m->call_id.len,
                          (const char *)m->call_id.data);
                break;
            }
            answered[k] = true;
            pending--;
            continue;
        }
        if (pending) {
            rc = fail(c, "messages[%zu]: an assistant message with tool_calls must be followed by one tool message per call",
                      caller - conv->msgs);
            break;
        }
        if (m && m->role == CHAT_ASSISTANT && m->n_calls) {
            caller = m;
            free(answered);
            answered = xcalloc(m->n_calls, sizeof *answered);
            pending = m->n_calls;
        }
    }
    free(answered);
    return rc;
}

static int messages(ctx_t *c, const json_t *list, chat_conv_t *conv) {
    if (!list) return fail(c, "missing 'messages'");
    if (!json_is_array(list)) return fail(c, "'messages': expected a list, got %s", type_name(list));
    if (!json_array_size(list)) return fail(c, "'messages' is empty");
    size_t n = json_array_size(list);
    conv->msgs = xcalloc(n, sizeof *conv->msgs);
    for (size_t i = 0; i < n; i++) {
        chat_msg_t *m = &conv->msgs[conv->n_msgs++];
        if (message(c, json_array_get(list, i), i, m)) return -1;
        if (m->prefix && (i + 1 < n || m->role != CHAT_ASSISTANT))
            return fail(c, "messages[%zu]: prefix is only allowed on the final message, which must be an assistant message", i);
    }
    return check_tool_answers(c, conv);
}

/* ---- tools ------------------------------------------------------------------------------- */

static int tool_name_ok(ctx_t *c, const json_t *name, size_t i) {
    size_t n = json_string_length(name);
    const char *s = json_string_value(name);
    if (!n) return fail(c, "tools[%zu].function.name: empty string", i);
    if (n > MAX_TOOL_NAME) return fail(c, "tools[%zu].function.name: longer than %d characters", i, MAX_TOOL_NAME);
    for (size_t k = 0; k < n; k++) {
        char ch = s[k];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
            return fail(c, "tools[%zu].function.name: must match ^[a-zA-Z0-9_-]+$", i);
    }
    return 0;
}

/* Missing parameters are an empty schema (an empty object for a strict tool). A strict tool's
 * schema is rewritten into the strict form (recipe checks nothing else then); other schemas
 * must be valid and of type object. Replaces t->parameters (the request's, or NULL). */
static int tool_parameters(ctx_t *c, chat_tool_t *t) {
    char why[256];
    json_t *given = t->parameters;
    const char *name = buf_cstr(&t->name);
    bool missing = !given;
    if (missing) given = t->strict == 1 ? json_pack("{s:s}", "type", "object") : json_object();
    else if (t->strict != 1 && !chat_schema_valid(given, why, sizeof why))
        return fail(c, "invalid schema for function '%s': %s", name, why);
    if (t->strict == 1) {
        t->parameters = chat_schema_strict(given, true, why, sizeof why);
        json_decref(given);
        return t->parameters ? 0 : fail(c, "invalid schema for strict function '%s': %s", name, why);
    }
    t->parameters = given;
    const json_t *type = json_is_object(given) ? json_object_get(given, "type") : NULL;
    if (!missing && (!json_is_string(type) || strcmp(json_string_value(type), "object")))
        return fail(c, "invalid schema for function '%s': the schema must have type \"object\"", name);
    return 0;
}

/* Reads the tool list; the checks that depend on tool_choice come in resolve_tools. */
static int tools(ctx_t *c, const json_t *list, chat_conv_t *conv) {
    if (!list) return 0;
    if (!json_is_array(list)) return fail(c, "'tools': expected a list, got %s", type_name(list));
    size_t n = json_array_size(list);
    conv->tools = xcalloc(n ? n : 1, sizeof *conv->tools);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(list, i);
        const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
        const json_t *fn = json_is_object(v) ? json_object_get(v, "function") : NULL;
        if (!is_function_tag(type)) return fail(c, "tools[%zu]: only tools of type 'function' are supported", i);
        if (!json_is_object(fn)) return fail(c, "tools[%zu]: missing 'function' object", i);
        chat_tool_t *t = &conv->tools[conv->n_tools++];
        t->strict = -1;
        const json_t *name = json_object_get(fn, "name"), *desc = field(fn, "description"), *strict = field(fn, "strict");
        const json_t *params = field(fn, "parameters");
        if (!json_is_string(name)) return fail(c, "tools[%zu].function.name: expected a string", i);
        if (tool_name_ok(c, name, i)) return -1;
        set_buf(&t->name, name);
        if (desc) {
            if (want_string(c, desc, "tools[].function.description")) return -1;
            t->has_description = true;
            set_buf(&t->description, desc);
        }
        if (strict) {
            if (!json_is_boolean(strict)) return fail(c, "tools[%zu].function.strict: expected a boolean", i);
            t->strict = json_is_true(strict);
        }
        t->parameters = params ? json_deep_copy(params) : NULL;
    }
    return 0;
}

static void free_tool(chat_tool_t *t) {
    buf_free(&t->name);
    buf_free(&t->description);
    json_decref(t->parameters);
}

static void drop_tools(chat_conv_t *conv) {
    for (size_t i = 0; i < conv->n_tools; i++) free_tool(&conv->tools[i]);
    conv->n_tools = 0;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}.
 * A named tool (kept in *named) will narrow the tools to that one and require a call. */
static int tool_choice(ctx_t *c, const json_t *v, chat_conv_t *conv, buf_t *named) {
    static const char *const names[] = {"auto", "none", "required"};
    conv->choice = CHAT_CHOICE_AUTO;
    if (!v) return 0;
    if (json_is_string(v)) {
        int k = enum_value(c, v, "tool_choice", names, DI_ARRAY_LEN(names), false);
        if (k < 0) return -1;
        conv->choice = (chat_choice_t)k;
        return 0;
    }
    const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    const json_t *fn = json_is_object(v) ? field(v, "function") : NULL;
    const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
    if (!is_function_tag(type) || !json_is_string(name))
        return fail(c, "tool_choice: expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    set_buf(named, name);
    conv->choice = CHAT_CHOICE_REQUIRED;
    return 0;
}

/* With tool_choice none the tools are dropped unchecked. Otherwise names must be unique and
 * every schema valid; a named choice keeps its tool only; strict and non-strict tools may
 * not be mixed. */
static int resolve_tools(ctx_t *c, chat_conv_t *conv, const buf_t *named, bool named_choice) {
    if (conv->choice == CHAT_CHOICE_NONE) {
        drop_tools(conv);
        return 0;
    }
    for (size_t i = 0; i < conv->n_tools; i++)
        for (size_t j = 0; j < i; j++)
            if (same(&conv->tools[j].name, &conv->tools[i].name))
                return fail(c, "tools: names must be unique ('%s' repeats)", buf_cstr(&conv->tools[i].name));
    for (size_t i = 0; i < conv->n_tools; i++)
        if (tool_parameters(c, &conv->tools[i])) return -1;
    if (named_choice && conv->n_tools) {
        size_t k = 0;
        while (k < conv->n_tools && !same(&conv->tools[k].name, named)) k++;
        if (k == conv->n_tools) return fail(c, "tool_choice: no function named '%.*s' in 'tools'", (int)named->len, (const char *)named->data);
        chat_tool_t keep = conv->tools[k];
        conv->tools[k] = conv->tools[0];
        conv->tools[0] = keep;
        for (size_t j = 1; j < conv->n_tools; j++) free_tool(&conv->tools[j]);
        conv->n_tools = 1;
    }
    for (size_t i = 1; i < conv->n_tools; i++)
        if ((conv->tools[i].strict == 1) != (conv->tools[0].strict == 1))
            return fail(c, "cannot use strict tools with non-strict tools in the same request");
    return 0;
}

/* ---- response format --------------------------------------------------------------------- */

static int response_format(ctx_t *c, const json_t *v, chat_conv_t *conv, chat_prompt_t *p) {
    static const char *const names[] = {"text", "json_object", "json_schema", "regex"};
    conv->format = CHAT_FORMAT_TEXT;
    if (!v) return 0;
    const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!type) return fail(c, "response_format: expected an object with a 'type'");
    int k = enum_value(c, type, "response_format.type", names, DI_ARRAY_LEN(names), false);
    if (k < 0) return -1;
    conv->format = (chat_format_t)k;
    if (conv->format == CHAT_FORMAT_REGEX) {
        const json_t *rx = json_object_get(v, "regex");
        if (!json_is_string(rx)) return fail(c, "response_format.regex: expected a string");
        set_buf(&conv->regex, rx);
        p->constraint = CHAT_CONSTRAINT_REGEX;
        set_buf(&p->constraint_text, rx);
    } else if (conv->format == CHAT_FORMAT_JSON_OBJECT) {
        p->constraint = CHAT_CONSTRAINT_JSON;
        p->parse_json_output = true;
    } else if (conv->format == CHAT_FORMAT_JSON_SCHEMA) {
        const json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js)) return fail(c, "response_format.json_schema: expected an object");
        const json_t *schema = json_object_get(js, "schema"), *name = field(js, "name"), *desc = field(js, "description");
        if (!schema) return fail(c, "response_format.json_schema: missing 'schema'");
        if ((name && want_string(c, name, "json_schema.name")) || (desc && want_string(c, desc, "json_schema.description"))) return -1;
        bool strict = false;
        if (opt_bool(c, js, "strict", "json_schema.strict", &strict)) return -1;
        /* A strict schema is only read into the strict form; others must be valid. The prompt
         * shows the schema as given, the constraint enforces the strict form. */
        char why[256];
        if (!strict && !chat_schema_valid(schema, why, sizeof why)) return fail(c, "invalid json schema: %s", why);
        conv->schema = json_deep_copy(schema);
        json_t *enforced = strict ? chat_schema_strict(schema, false, why, sizeof why) : json_incref(conv->schema);
        if (!enforced) return fail(c, "invalid strict json schema: %s", why);
        p->constraint = CHAT_CONSTRAINT_JSON;
        chat_json_write(&p->constraint_text, enforced, CHAT_JSON_COMPACT);
        json_decref(enforced);
    }
    return 0;
}

/* json_object needs the word "json" (any case) somewhere in the messages, as OpenAI asks. */
static bool mentions_json(const chat_conv_t *conv) {
    for (size_t i = 0; i < conv->n_msgs; i++) {
        const buf_t *b = &conv->msgs[i].content;
        for (size_t k = 0; k + 4 <= b->len; k++)
            if (!strncasecmp((const char *)b->data + k, "json", 4)) return true;
    }
    return false;
}

/* ---- sampling and the rest --------------------------------------------------------------- */

/* Reads the sampling fields; top_p is resolved later, it depends on the tools. */
static int sampling(ctx_t *c, const json_t *body, chat_prompt_t *p, double *top_p, bool *has_top_p) {
    double t = 1, tp = 1, pen;
    int has_t = opt_f32(c, body, "temperature", &t), has_tp = opt_f32(c, body, "top_p", &tp);
    if (has_t < 0 || has_tp < 0) return -1;
    if (has_t && !(t >= 0 && t <= 2)) return fail(c, "invalid temperature value, the valid range of temperature is [0, 2]");
    if (has_tp && !(tp > 0 && tp <= 1)) return fail(c, "invalid top_p value, the valid range of top_p is (0, 1.0]");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < 2; i++) {
        int has = opt_f32(c, body, penalties[i], &pen);
        if (has < 0) return -1;
        if (has && !(pen >= -2 && pen <= 2)) return fail(c, "invalid %s value, the valid range of %s is [-2, 2]", penalties[i], penalties[i]);
    }
    p->temperature = p->thinking ? 1 : t; /* thinking mode samples at temperature 1 */
    *top_p = tp;
    *has_top_p = has_tp;

    uint64_t u;
    int has = opt_uint(c, body, "max_tokens", UINT32_MAX, &u);
    if (has < 0) return -1;
    if (has && (u < 1 || u > MAX_TOKENS_UPPER))
        return fail(c, "invalid max_tokens value, the valid range of max_tokens is [1, %d]", MAX_TOKENS_UPPER);
    p->max_tokens = has ? (int64_t)u : -1;
    if ((has = opt_uint(c, body, "seed", UINT64_MAX, &p->seed)) < 0) return -1;
    if (has && p->seed >> 63) return fail(c, "invalid seed value, the valid range of seed is [0, 2^63)");
    p->has_seed = has;
    if ((has = opt_uint(c, body, "n", UINT8_MAX, &u)) < 0) return -1;
    if (has && u != 1) return fail(c, "invalid n value (only n = 1 is supported)");
    if (opt_bool(c, body, "logprobs", "logprobs", &p->logprobs)) return -1;
    if ((has = opt_uint(c, body, "top_logprobs", UINT8_MAX, &u)) < 0) return -1;
    if (has && u > 20) return fail(c, "invalid top_logprobs value, the valid range of top_logprobs is [0, 20]");
    if (has && !p->logprobs) return fail(c, "logprobs must be set to true if top_logprobs is used");
    p->top_logprobs = has ? (int)u : -1;
    return 0;
}

static int stop_sequences(ctx_t *c, const json_t *v, chat_prompt_t *p) {
    if (!v) return 0;
    if (!json_is_string(v) && !json_is_array(v)) return fail(c, "'stop': expected a string or a list");
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (n > MAX_STOP) return fail(c, "'stop': at most %d sequences, got %zu", MAX_STOP, n);
    p->stop = xcalloc(n ? n : 1, sizeof *p->stop);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (want_string(c, s, "'stop'")) return -1;
        if (!json_string_length(s)) return fail(c, "'stop': empty string");
        set_buf(&p->stop[p->n_stop++], s);
    }
    return 0;
}

static int stream_fields(ctx_t *c, const json_t *body, chat_prompt_t *p) {
    if (opt_bool(c, body, "stream", "stream", &p->stream)) return -1;
    const json_t *opts = field(body, "stream_options");
    if (!opts) return 0;
    bool usage;
    if (!json_is_object(opts)) return fail(c, "stream_options: expected an object");
    if (opt_bool(c, opts, "include_usage", "stream_options.include_usage", &usage)) return -1;
    if (!p->stream) return fail(c, "stream_options should be set along with stream = true");
    return 0;
}

static int parallel_tool_calls(ctx_t *c, const json_t *body) {
    bool b;
    return opt_bool(c, body, "parallel_tool_calls", "parallel_tool_calls", &b);
}

/* thinking: {"type": enabled|adaptive|disabled}; reasoning_effort "none" alone turns it off. */
static int thinking_mode(ctx_t *c, const json_t *body, chat_conv_t *conv) {
    static const char *const types[] = {"enabled", "adaptive", "disabled"};
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"};
    static const chat_effort_t effort_of[] = {CHAT_EFFORT_HIGH, CHAT_EFFORT_LOW, CHAT_EFFORT_LOW, CHAT_EFFORT_HIGH,
                                              CHAT_EFFORT_HIGH, CHAT_EFFORT_XHIGH, CHAT_EFFORT_MAX, CHAT_EFFORT_MAX};
    const json_t *th = field(body, "thinking"), *re = field(body, "reasoning_effort");
    int type = -1, effort = -1;
    if (th) {
        if (!json_is_object(th)) return fail(c, "'thinking': expected an object");
        const json_t *t = json_object_get(th, "type");
        if (!t) return fail(c, "'thinking': missing 'type'");
        if ((type = enum_value(c, t, "thinking.type", types, DI_ARRAY_LEN(types), true)) < 0) return -1;
        uint64_t budget;
        if (opt_uint(c, th, "budget_tokens", UINT64_MAX, &budget) < 0) return -1;
    }
    if (re && (effort = enum_value(c, re, "reasoning_effort", efforts, DI_ARRAY_LEN(efforts), true)) < 0) return -1;
    conv->thinking = type >= 0 ? type != 2 : effort != 0;
    conv->effort = !conv->thinking ? CHAT_EFFORT_UNSET : effort >= 0 ? effort_of[effort] : CHAT_EFFORT_HIGH;
    return 0;
}

static int model_version(ctx_t *c, const json_t *model, chat_conv_t *conv) {
    if (!model) return fail(c, "missing 'model'");
    if (!json_is_string(model)) return fail(c, "'model': expected a string, got %s", type_name(model));
    const char *m = json_string_value(model);
    if (!strcmp(m, "DeepSeek-V4.1-Flash")) conv->model = CHAT_MODEL_V41;
    else if (!strcmp(m, "DeepSeek-V4-Pro")) conv->model = CHAT_MODEL_V4;
    else return fail(c, "the supported model names are DeepSeek-V4-Pro, DeepSeek-V4.1-Flash, but you passed %s", m);
    return 0;
}

/* The option checks that look at messages, tools and format together. */
static int cross_checks(ctx_t *c, const chat_conv_t *conv, size_t requested_tools, bool has_format) {
    const chat_msg_t *last = &conv->msgs[conv->n_msgs - 1];
    bool prefix = last->role == CHAT_ASSISTANT && last->prefix, calls = false;
    for (size_t i = 0; i < conv->n_msgs; i++) calls |= conv->msgs[i].n_calls > 0;
    if (conv->format == CHAT_FORMAT_JSON_OBJECT && !mentions_json(conv))
        return fail(c, "prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'");
    if (prefix && conv->format == CHAT_FORMAT_JSON_OBJECT) return fail(c, "response_format json_object should not be used with prefix");
    if (prefix && (requested_tools || calls)) return fail(c, "function calls should not be used with prefix");
    if (has_format && conv->n_tools && conv->tools[0].strict == 1)
        return fail(c, "response_format should not be used with strict tools");
    return 0;
}

/* top_p in thinking mode: V4.1 raises a requested one to at least 0.95, V4 samples tool
 * turns at 0.95 and others at 1. Outside thinking mode V4.1 ignores it, V4 keeps it. */
static double resolve_top_p(const chat_conv_t *conv, double top_p, bool has_top_p) {
    const double floor = (double)0.95f; /* recipe computes in float32 */
    if (conv->model == CHAT_MODEL_V41) return conv->thinking && has_top_p ? fmax(top_p, floor) : 1;
    if (conv->thinking) return conv->n_tools ? floor : 1;
    return top_p;
}

static void output_options(chat_conv_t *conv, chat_prompt_t *p, double top_p, bool has_top_p) {
    const chat_msg_t *last = conv->n_msgs ? &conv->msgs[conv->n_msgs - 1] : NULL;
    p->top_p = resolve_top_p(conv, top_p, has_top_p);
    p->thinking = conv->thinking;
    p->stage = CHAT_STAGE_NONE;
    if (conv->thinking) {
        p->stage = CHAT_STAGE_REASONING_START;
        if (last && last->role == CHAT_ASSISTANT && last->prefix)
            p->stage = last->content.len ? CHAT_STAGE_CONTENT_CONTINUATION
                     : last->reasoning.len ? CHAT_STAGE_REASONING_CONTINUATION : CHAT_STAGE_REASONING_START;
    }
    p->max_effort = conv->thinking && conv->effort == CHAT_EFFORT_MAX;
    p->tools = conv->n_tools > 0;
    p->starts_in_tool_calls = p->tools && conv->choice == CHAT_CHOICE_REQUIRED;
    if (!p->tools) return;
    /* Tools take the output constraint over any response format. */
    p->constraint = p->starts_in_tool_calls ? CHAT_CONSTRAINT_TOOL_CALL_REQUIRED : CHAT_CONSTRAINT_TOOL_CALL;
    buf_clear(&p->constraint_text);
    json_t *list = json_array();
    for (size_t i = 0; i < conv->n_tools; i++) {
        const chat_tool_t *t = &conv->tools[i];
        json_t *fn = json_object();
        json_object_set_new(fn, "name", json_buf(&t->name));
        json_object_set_new(fn, "description", t->has_description ? json_buf(&t->description) : json_null());
        json_object_set(fn, "parameters", t->parameters);
        json_object_set_new(fn, "strict", t->strict < 0 ? json_null() : json_boolean(t->strict));
        json_array_append_new(list, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    chat_json_write(&p->constraint_text, list, CHAT_JSON_COMPACT);
    json_decref(list);
}


/* recipe drops empty system messages, and reasoning outside thinking mode. */
static void tidy_messages(chat_conv_t *conv) {
    size_t n = 0;
    for (size_t i = 0; i < conv->n_msgs; i++) {
        chat_msg_t *m = &conv->msgs[i];
        if (m->role == CHAT_SYSTEM && !m->content.len) {
            buf_free(&m->content);
            continue;
        }
        if (!conv->thinking) {
            m->has_reasoning = false;
            buf_free(&m->reasoning);
        }
        conv->msgs[n++] = *m;
    }
    conv->n_msgs = n;
}

static int convert(ctx_t *c, const json_t *body, chat_conv_t *conv, chat_prompt_t *p) {
    if (!json_is_object(body)) return fail(c, "request body must be a JSON object");
    if (model_version(c, json_object_get(body, "model"), conv)) return -1;
    p->model = conv->model;
    if (thinking_mode(c, body, conv)) return -1;
    p->thinking = conv->thinking;
    if (messages(c, json_object_get(body, "messages"), conv)) return -1;
    if (tools(c, field(body, "tools"), conv)) return -1;
    size_t requested_tools = conv->n_tools;
    buf_t named = {0};
    int rc = tool_choice(c, field(body, "tool_choice"), conv, &named);
    if (!rc) rc = resolve_tools(c, conv, &named, named.len > 0 || json_is_object(field(body, "tool_choice")));
    buf_free(&named);
    if (rc) return -1;
    if (response_format(c, field(body, "response_format"), conv, p)) return -1;
    double top_p = 1;
    bool has_top_p = false;
    if (sampling(c, body, p, &top_p, &has_top_p) || stop_sequences(c, field(body, "stop"), p) || stream_fields(c, body, p) ||
        parallel_tool_calls(c, body))
        return -1;
    if (cross_checks(c, conv, requested_tools, field(body, "response_format") != NULL)) return -1;
    if (conv->n_tools && conv->thinking && conv->choice == CHAT_CHOICE_REQUIRED)
        return fail(c, "thinking mode does not support this tool_choice");
    if (!conv->n_tools && conv->choice == CHAT_CHOICE_REQUIRED) conv->choice = CHAT_CHOICE_AUTO;
    tidy_messages(conv);
    output_options(conv, p, top_p, has_top_p);
    return 0;
}

int chat_render(const json_t *body, chat_prompt_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->max_tokens = -1;
    out->top_logprobs = -1;
    chat_conv_t conv = {0};
    ctx_t c = {err, errlen};
    int rc = convert(&c, body, &conv, out);
    if (!rc) chat_render_conv(&conv, out);
    chat_conv_free(&conv);
    return rc;
}

void chat_conv_free(chat_conv_t *conv) {
    for (size_t i = 0; i < conv->n_msgs; i++) {
        chat_msg_t *m = &conv->msgs[i];
        buf_free(&m->content);
        buf_free(&m->reasoning);
        buf_free(&m->call_id);
        for (size_t k = 0; k < m->n_calls; k++) {
            buf_free(&m->calls[k].id);
            buf_free(&m->calls[k].name);
            buf_free(&m->calls[k].arguments);
        }
        free(m->calls);
    }
    free(conv->msgs);
    drop_tools(conv);
    free(conv->tools);
    json_decref(conv->schema);
    buf_free(&conv->regex);
    memset(conv, 0, sizeof *conv);
}

void chat_prompt_free(chat_prompt_t *p) {
    buf_free(&p->text);
    free(p->special);
    for (size_t i = 0; i < p->n_stop; i++) buf_free(&p->stop[i]);
    free(p->stop);
    buf_free(&p->constraint_text);
    memset(p, 0, sizeof *p);
}

int chat_resolve_max_tokens(const chat_prompt_t *p, size_t prompt_tokens, size_t context_limit, int64_t *out,
                            char *err, size_t errlen) {
    if (p->max_tokens >= 0) {
        if (prompt_tokens + (size_t)p->max_tokens > context_limit) {
            snprintf(err, errlen,
                     "this model's maximum context length is %zu tokens, but %zu were requested (%zu in the messages, "
                     "%lld in the completion); reduce the length of the messages or completion",
                     context_limit, prompt_tokens + (size_t)p->max_tokens, prompt_tokens, (long long)p->max_tokens);
            return -1;
        }
        *out = p->max_tokens;
        return 0;
    }
    if (prompt_tokens > context_limit) {
        snprintf(err, errlen,
                 "this model's maximum context length is %zu tokens, but the messages take %zu; reduce their length",
                 context_limit, prompt_tokens);
        return -1;
    }
    int64_t want = !p->thinking ? 8192 : p->max_effort ? 131072 : 65536;
    int64_t left = (int64_t)(context_limit - prompt_tokens);
    *out = want < left ? want : left > 1 ? left : 1;
    return 0;
}
