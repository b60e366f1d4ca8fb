/* The conversation between request conversion (chat_request.c) and prompt rendering
 * (chat_render.c): recipe's Conversation, in plain structs. Strings are buf_t because
 * request text may hold NUL bytes. */
#ifndef DI_CHAT_CONV_H
#define DI_CHAT_CONV_H

#include "chat.h"
#include "chat_fields.h"

typedef enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL, CHAT_LATEST_REMINDER } chat_role_t;

typedef struct {
    buf_t id, name, arguments; /* arguments: the caller's text, JSON object expected */
} chat_call_t;

typedef struct {
    chat_role_t role;
    buf_t content;
    buf_t reasoning;    /* assistant: reasoning_content */
    chat_call_t *calls; /* assistant */
    size_t n_calls;
    buf_t call_id;      /* tool: the call it answers */
    bool prefix;        /* assistant: continue this message instead of starting a turn */
} chat_msg_t;

typedef struct {
    buf_t name;
    bool has_description;
    buf_t description;
    json_t *parameters; /* owned; NULL renders as null */
    int strict;         /* -1 unset, 0 false, 1 true */
} chat_tool_t;

typedef enum { CHAT_CHOICE_AUTO, CHAT_CHOICE_NONE, CHAT_CHOICE_REQUIRED } chat_choice_t;
typedef enum { CHAT_EFFORT_UNSET, CHAT_EFFORT_LOW, CHAT_EFFORT_HIGH, CHAT_EFFORT_XHIGH, CHAT_EFFORT_MAX } chat_effort_t;
typedef enum { CHAT_FORMAT_TEXT, CHAT_FORMAT_JSON_OBJECT, CHAT_FORMAT_JSON_SCHEMA, CHAT_FORMAT_REGEX } chat_format_t;

typedef struct {
    chat_model_t model;
    chat_msg_t *msgs;
    size_t n_msgs, cap_msgs;
    chat_tool_t *tools;
    size_t n_tools;
    bool thinking;
    chat_choice_t choice;
    chat_effort_t effort;
    chat_format_t format;
    json_t *schema; /* json_schema format: owned, as the request gave it */
} chat_conv_t;

/* Conversion steps (chat_messages.c, chat_tools.c); each returns -1 with c's error set. */
int chat_read_messages(chat_ctx_t *c, const json_t *list, chat_conv_t *conv);
/* Reads the tool list; the checks that depend on tool_choice come in chat_resolve_tools. */
int chat_read_tools(chat_ctx_t *c, const json_t *list, chat_conv_t *conv);
/* tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}.
 * A named tool (its name in *named) will narrow the tools to that one and require a call. */
int chat_read_tool_choice(chat_ctx_t *c, const json_t *v, chat_conv_t *conv, buf_t *named, bool *is_named);
/* With tool_choice none the tools are dropped unchecked. Otherwise names must be unique and
 * every schema valid; a named choice keeps its tool only; strict and non-strict tools may not
 * be mixed. */
int chat_resolve_tools(chat_ctx_t *c, chat_conv_t *conv, const buf_t *named, bool is_named);
void chat_drop_tools(chat_conv_t *conv);
/* Sets conv->format (and schema) and the output constraint it asks for. */
int chat_read_response_format(chat_ctx_t *c, const json_t *v, chat_conv_t *conv, chat_prompt_t *p);

/* Renders conv into p->text / p->special (p->model is set from conv). */
void chat_render_conv(const chat_conv_t *conv, chat_prompt_t *p);

void chat_conv_free(chat_conv_t *conv);

#endif
