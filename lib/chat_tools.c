/* Tools, tool_choice and response_format of a request: recipe's checks on names and schemas,
 * the strict rewrite, and the output constraint a response format asks for. */
#include "chat_conv.h"
#include "chat_json.h"
#include "chat_schema.h"

#include <string.h>

#define MAX_TOOL_NAME 128

static int tool_name_ok(chat_ctx_t *c, const json_t *name, size_t i) {
    size_t n = json_string_length(name);
    const char *s = json_string_value(name);
    if (!n) return chat_fail(c, "tools[%zu].function.name: empty string", i);
    if (n > MAX_TOOL_NAME) return chat_fail(c, "tools[%zu].function.name: longer than %d characters", i, MAX_TOOL_NAME);
    for (size_t k = 0; k < n; k++) {
        char ch = s[k];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
            return chat_fail(c, "tools[%zu].function.name: must match ^[a-zA-Z0-9_-]+$", i);
    }
    return 0;
}

/* Missing parameters are an empty schema (an empty object for a strict tool). A strict tool's
 * schema is rewritten into the strict form (recipe checks nothing else then); other schemas
 * must be valid and of type object. Replaces t->parameters (the request's, or NULL). */
static int tool_parameters(chat_ctx_t *c, chat_tool_t *t) {
    char why[256];
    json_t *given = t->parameters;
    const char *name = buf_cstr(&t->name);
    bool missing = !given;
    if (missing) given = t->strict == 1 ? json_pack("{s:s}", "type", "object") : json_object();
    else if (t->strict != 1 && !chat_schema_valid(given, why, sizeof why))
        return chat_fail(c, "invalid schema for function '%s': %s", name, why);
    if (t->strict == 1) {
        t->parameters = chat_schema_strict(given, true, why, sizeof why);
        json_decref(given);
        return t->parameters ? 0 : chat_fail(c, "invalid schema for strict function '%s': %s", name, why);
    }
    t->parameters = given;
    const json_t *type = json_is_object(given) ? json_object_get(given, "type") : NULL;
    if (!missing && (!json_is_string(type) || strcmp(json_string_value(type), "object")))
        return chat_fail(c, "invalid schema for function '%s': the schema must have type \"object\"", name);
    return 0;
}

int chat_read_tools(chat_ctx_t *c, const json_t *list, chat_conv_t *conv) {
    if (!list) return 0;
    if (!json_is_array(list)) return chat_fail(c, "'tools': expected a list, got %s", chat_type_name(list));
    size_t n = json_array_size(list);
    conv->tools = xcalloc(n ? n : 1, sizeof *conv->tools);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(list, i);
        const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
        const json_t *fn = json_is_object(v) ? json_object_get(v, "function") : NULL;
        if (!chat_is_function_tag(type)) return chat_fail(c, "tools[%zu]: only tools of type 'function' are supported", i);
        if (!json_is_object(fn)) return chat_fail(c, "tools[%zu]: missing 'function' object", i);
        chat_tool_t *t = &conv->tools[conv->n_tools++];
        t->strict = -1;
        const json_t *name = json_object_get(fn, "name"), *desc = chat_field(fn, "description"), *strict = chat_field(fn, "strict");
        const json_t *params = chat_field(fn, "parameters");
        if (!json_is_string(name)) return chat_fail(c, "tools[%zu].function.name: expected a string", i);
        if (tool_name_ok(c, name, i)) return -1;
        chat_set_buf(&t->name, name);
        if (desc) {
            if (chat_want_string(c, desc, "tools[].function.description")) return -1;
            t->has_description = true;
            chat_set_buf(&t->description, desc);
        }
        if (strict) {
            if (!json_is_boolean(strict)) return chat_fail(c, "tools[%zu].function.strict: expected a boolean", i);
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

void chat_drop_tools(chat_conv_t *conv) {
    for (size_t i = 0; i < conv->n_tools; i++) free_tool(&conv->tools[i]);
    conv->n_tools = 0;
}

int chat_read_tool_choice(chat_ctx_t *c, const json_t *v, chat_conv_t *conv, buf_t *named, bool *is_named) {
    static const char *const names[] = {"auto", "none", "required"};
    conv->choice = CHAT_CHOICE_AUTO;
    if (!v) return 0;
    if (json_is_string(v)) {
        int k = chat_enum_value(c, v, "tool_choice", names, DI_ARRAY_LEN(names), false);
        if (k < 0) return -1;
        conv->choice = (chat_choice_t)k;
        return 0;
    }
    const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    const json_t *fn = json_is_object(v) ? chat_field(v, "function") : NULL;
    const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
    if (!chat_is_function_tag(type) || !json_is_string(name))
        return chat_fail(c, "tool_choice: expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    chat_set_buf(named, name);
    *is_named = true;
    conv->choice = CHAT_CHOICE_REQUIRED;
    return 0;
}

int chat_resolve_tools(chat_ctx_t *c, chat_conv_t *conv, const buf_t *named, bool is_named) {
    if (conv->choice == CHAT_CHOICE_NONE) {
        chat_drop_tools(conv);
        return 0;
    }
    for (size_t i = 0; i < conv->n_tools; i++)
        for (size_t j = 0; j < i; j++)
            if (chat_same(&conv->tools[j].name, &conv->tools[i].name))
                return chat_fail(c, "tools: names must be unique ('%s' repeats)", buf_cstr(&conv->tools[i].name));
    for (size_t i = 0; i < conv->n_tools; i++)
        if (tool_parameters(c, &conv->tools[i])) return -1;
    if (is_named && conv->n_tools) {
        size_t k = 0;
        while (k < conv->n_tools && !chat_same(&conv->tools[k].name, named)) k++;
        if (k == conv->n_tools) return chat_fail(c, "tool_choice: no function named '%.*s' in 'tools'", (int)named->len, (const char *)named->data);
        chat_tool_t keep = conv->tools[k];
        conv->tools[k] = conv->tools[0];
        conv->tools[0] = keep;
        for (size_t j = 1; j < conv->n_tools; j++) free_tool(&conv->tools[j]);
        conv->n_tools = 1;
    }
    for (size_t i = 1; i < conv->n_tools; i++)
        if ((conv->tools[i].strict == 1) != (conv->tools[0].strict == 1))
            return chat_fail(c, "cannot use strict tools with non-strict tools in the same request");
    return 0;
}

int chat_read_response_format(chat_ctx_t *c, const json_t *v, chat_conv_t *conv, chat_prompt_t *p) {
    static const char *const names[] = {"text", "json_object", "json_schema", "regex"};
    conv->format = CHAT_FORMAT_TEXT;
    if (!v) return 0;
    const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!type) return chat_fail(c, "response_format: expected an object with a 'type'");
    int k = chat_enum_value(c, type, "response_format.type", names, DI_ARRAY_LEN(names), false);
    if (k < 0) return -1;
    conv->format = (chat_format_t)k;
    if (conv->format == CHAT_FORMAT_REGEX) {
        const json_t *rx = json_object_get(v, "regex");
        if (!json_is_string(rx)) return chat_fail(c, "response_format.regex: expected a string");
        p->constraint = CHAT_CONSTRAINT_REGEX;
        chat_set_buf(&p->constraint_text, rx);
    } else if (conv->format == CHAT_FORMAT_JSON_OBJECT) {
        p->constraint = CHAT_CONSTRAINT_JSON;
        p->parse_json_output = true;
    } else if (conv->format == CHAT_FORMAT_JSON_SCHEMA) {
        const json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js)) return chat_fail(c, "response_format.json_schema: expected an object");
        const json_t *schema = json_object_get(js, "schema"), *name = chat_field(js, "name"), *desc = chat_field(js, "description");
        if (!schema) return chat_fail(c, "response_format.json_schema: missing 'schema'");
        if ((name && chat_want_string(c, name, "json_schema.name")) || (desc && chat_want_string(c, desc, "json_schema.description"))) return -1;
        bool strict = false;
        if (chat_opt_bool(c, js, "strict", "json_schema.strict", &strict)) return -1;
        /* A strict schema is only read into the strict form; others must be valid. The prompt
         * shows the schema as given, the constraint enforces the strict form. */
        char why[256];
        if (!strict && !chat_schema_valid(schema, why, sizeof why)) return chat_fail(c, "invalid json schema: %s", why);
        conv->schema = json_deep_copy(schema);
        json_t *enforced = strict ? chat_schema_strict(schema, false, why, sizeof why) : json_incref(conv->schema);
        if (!enforced) return chat_fail(c, "invalid strict json schema: %s", why);
        p->constraint = CHAT_CONSTRAINT_JSON;
        chat_json_write(&p->constraint_text, enforced, CHAT_JSON_COMPACT);
        json_decref(enforced);
    }
    return 0;
}
