/* The messages of a request -> chat_msg_t, with recipe's checks: content types, tool calls and
 * their answers, prefix continuation only at the end. Images are refused (text-only engine). */
#include "chat_conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char IMAGE_REFUSED[] = "image input is not supported: text-only engine";

/* Message content: a string, or a list of parts whose texts are joined by a blank line. */
static int content_text(chat_ctx_t *c, const json_t *v, size_t index, bool parts_ok, buf_t *out) {
    if (json_is_string(v)) {
        chat_set_buf(out, v);
        return 0;
    }
    if (!parts_ok || !json_is_array(v))
        return chat_fail(c, "messages[%zu].content: expected a string%s, got %s", index, parts_ok ? " or a list" : "",
                    v ? chat_type_name(v) : "nothing");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *part = json_array_get(v, i);
        const json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        if (!json_is_string(type)) return chat_fail(c, "messages[%zu].content[%zu]: expected an object with a string 'type'", index, i);
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) {
            const json_t *text = json_object_get(part, "text");
            if (!json_is_string(text)) return chat_fail(c, "messages[%zu].content[%zu].text: expected a string", index, i);
            if (i) buf_puts(out, "\n\n");
            chat_set_buf(out, text);
        } else if (!strcmp(t, "image_url")) {
            return chat_fail(c, "messages[%zu].content[%zu]: %s", index, i, IMAGE_REFUSED);
        } else if (!strcmp(t, "file")) {
            return chat_fail(c, "messages[%zu].content[%zu]: file content is not supported", index, i);
        } else {
            return chat_fail(c, "messages[%zu].content[%zu]: unknown content type '%s' (expected text)", index, i, t);
        }
    }
    return 0;
}

static int tool_call(chat_ctx_t *c, const json_t *v, size_t index, size_t k, chat_call_t *out) {
    if (!json_is_object(v)) return chat_fail(c, "messages[%zu].tool_calls[%zu]: expected an object", index, k);
    const json_t *id = json_object_get(v, "id"), *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
    if (!id || !type || !fn) return chat_fail(c, "messages[%zu].tool_calls[%zu]: 'id', 'type' and 'function' are required", index, k);
    if (!json_is_string(id)) return chat_fail(c, "messages[%zu].tool_calls[%zu].id: expected a string", index, k);
    if (!chat_is_function_tag(type)) return chat_fail(c, "messages[%zu].tool_calls[%zu].type: expected 'function'", index, k);
    const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_object(fn) || !json_is_string(name) || !json_is_string(args))
        return chat_fail(c, "messages[%zu].tool_calls[%zu].function: needs string 'name' and 'arguments'", index, k);
    /* Arguments that are not JSON are rendered as text, like recipe does; but an integer
     * beyond 64 bits is JSON that jansson cannot hold, and rendering it as text would differ. */
    json_error_t jerr;
    json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    json_decref(parsed);
    if (!parsed && json_error_code(&jerr) == json_error_numeric_overflow)
        return chat_fail(c, "messages[%zu].tool_calls[%zu].function.arguments: %s (integers must fit in 64 bits)", index, k, jerr.text);
    chat_set_buf(&out->id, id);
    chat_set_buf(&out->name, name);
    chat_set_buf(&out->arguments, args);
    return 0;
}


static int assistant_fields(chat_ctx_t *c, const json_t *v, size_t index, chat_msg_t *m) {
    const json_t *content = chat_field(v, "content"), *calls = chat_field(v, "tool_calls"), *reasoning = chat_field(v, "reasoning_content");
    if (!content && !calls) return chat_fail(c, "messages[%zu]: an assistant message needs content or tool_calls", index);
    if (content && json_is_array(content))
        for (size_t i = 0; i < json_array_size(content); i++) {
            const json_t *type = json_object_get(json_array_get(content, i), "type");
            if (json_is_string(type) && !strcmp(json_string_value(type), "image_url"))
                return chat_fail(c, "messages[%zu].content[%zu]: %s", index, i, IMAGE_REFUSED);
        }
    if (content && content_text(c, content, index, true, &m->content)) return -1;
    if (reasoning) {
        if (chat_want_string(c, reasoning, "reasoning_content")) return -1;
        chat_set_buf(&m->reasoning, reasoning);
    }
    if (chat_opt_bool(c, v, "prefix", "prefix", &m->prefix)) return -1;
    if (!calls) return 0;
    if (!json_is_array(calls)) return chat_fail(c, "messages[%zu].tool_calls: expected a list", index);
    if (!json_array_size(calls)) return chat_fail(c, "messages[%zu].tool_calls: empty list (at least one call is required)", index);
    m->n_calls = json_array_size(calls);
    m->calls = xcalloc(m->n_calls, sizeof *m->calls);
    for (size_t k = 0; k < m->n_calls; k++) {
        if (tool_call(c, json_array_get(calls, k), index, k, &m->calls[k])) return -1;
        for (size_t j = 0; j < k; j++)
            if (chat_same(&m->calls[j].id, &m->calls[k].id))
                return chat_fail(c, "messages[%zu]: duplicate tool_call id '%.*s'", index, (int)m->calls[k].id.len, (const char *)m->calls[k].id.data);
    }
    return 0;
}

static int message(chat_ctx_t *c, const json_t *v, size_t index, chat_msg_t *m) {
    static const char *const roles[] = {"system", "user", "assistant", "tool", "latest_reminder"};
    if (!json_is_object(v)) return chat_fail(c, "messages[%zu]: expected an object", index);
    const json_t *role = json_object_get(v, "role");
    if (!role) return chat_fail(c, "messages[%zu]: missing 'role'", index);
    char what[48];
    snprintf(what, sizeof what, "messages[%zu].role", index);
    int r = chat_enum_value(c, role, what, roles, DI_ARRAY_LEN(roles), false);
    if (r < 0) return -1;
    m->role = (chat_role_t)r;
    const json_t *name = chat_field(v, "name"), *content = json_object_get(v, "content");
    if (m->role != CHAT_TOOL && m->role != CHAT_LATEST_REMINDER && name && chat_want_string(c, name, "name")) return -1;
    switch (m->role) {
    case CHAT_SYSTEM:
    case CHAT_USER: return content_text(c, content, index, true, &m->content);
    case CHAT_LATEST_REMINDER: return content_text(c, content, index, false, &m->content);
    case CHAT_TOOL: {
        const json_t *id = json_object_get(v, "tool_call_id");
        if (!json_is_string(id)) return chat_fail(c, "messages[%zu]: a tool message needs a string 'tool_call_id'", index);
        chat_set_buf(&m->call_id, id);
        return content_text(c, content, index, true, &m->content);
    }
    case CHAT_ASSISTANT: return assistant_fields(c, v, index, m);
    }
    return 0;
}

/* Every call must be answered by the tool messages that follow it, before anything else. */
static int check_tool_answers(chat_ctx_t *c, const chat_conv_t *conv) {
    const chat_msg_t *caller = NULL;
    bool *answered = NULL;
    size_t pending = 0;
    int rc = 0;
    for (size_t i = 0; i <= conv->n_msgs && !rc; i++) {
        const chat_msg_t *m = i < conv->n_msgs ? &conv->msgs[i] : NULL;
        if (m && m->role == CHAT_TOOL) {
            if (!pending) {
                rc = chat_fail(c, "messages[%zu]: a tool message must answer a call of the preceding assistant message", i);
                break;
            }
            size_t k = 0;
            while (k < caller->n_calls && (answered[k] || !chat_same(&caller->calls[k].id, &m->call_id))) k++;
            if (k == caller->n_calls) {
                rc = chat_fail(c, "messages[%zu]: tool_call_id '%.*s' answers no pending call", i, (int)m->call_id.len,
                          (const char *)m->call_id.data);
                break;
            }
            answered[k] = true;
            pending--;
            continue;
        }
        if (pending) {
            rc = chat_fail(c, "messages[%zu]: an assistant message with tool_calls must be followed by one tool message per call",
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

int chat_read_messages(chat_ctx_t *c, const json_t *list, chat_conv_t *conv) {
    if (!list) return chat_fail(c, "missing 'messages'");
    if (!json_is_array(list)) return chat_fail(c, "'messages': expected a list, got %s", chat_type_name(list));
    if (!json_array_size(list)) return chat_fail(c, "'messages' is empty");
    size_t n = json_array_size(list);
    conv->msgs = xcalloc(n, sizeof *conv->msgs);
    for (size_t i = 0; i < n; i++) {
        chat_msg_t *m = &conv->msgs[conv->n_msgs++];
        if (message(c, json_array_get(list, i), i, m)) return -1;
        if (m->prefix && (i + 1 < n || m->role != CHAT_ASSISTANT))
            return chat_fail(c, "messages[%zu]: prefix is only allowed on the final message, which must be an assistant message", i);
    }
    return check_tool_answers(c, conv);
}
