/* Conversation -> prompt text with special-token spans, the DeepSeek V4 / V4.1 template.
 *
 * Layout: BOS, the reasoning-effort line (thinking mode), each message, then "<｜Assistant｜>"
 * and "<think>" (thinking) or "</think>" for the turn to generate. When tools or a response
 * schema are given, a system message is put first to hold the tool prompt and the schema.
 * V4.1 marks every system message with <｜System｜> and keeps it in place; V4 has no system
 * token and gathers all system text at the start. */
#include "chat_conv.h"
#include "chat_json.h"

#include <stdlib.h>
#include <string.h>

#define TOK_BOS "<｜begin▁of▁sentence｜>"
#define TOK_EOS "<｜end▁of▁sentence｜>"
#define TOK_SYSTEM "<｜System｜>"
#define TOK_USER "<｜User｜>"
#define TOK_ASSISTANT "<｜Assistant｜>"
#define TOK_REMINDER "<｜latest_reminder｜>"
#define TOK_THINK "<think>"
#define TOK_UNTHINK "</think>"
#define TOK_DSML "｜DSML｜"

/* Grounding tokens the model writes in its answers; in assistant history they stay tokens. */
static const char *const GROUNDING[] = {
    "<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>",
    "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>",
};

static const char FORMAT_HEADER[] =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

typedef struct {
    const char *calls, *invoke, *parameter; /* tag names after ｜DSML｜ */
    bool system_token;                      /* V4.1: <｜System｜>, systems stay in place */
    bool merge_users;                       /* V4: consecutive user messages become one */
    bool args_newline_after_each;           /* V4: "\n" after every parameter, V4.1: between */
    chat_json_style_t json;                 /* JSON in the prompt */
    const char *json_object_format;         /* json_object's text, NULL: a schema {"type": "json_object"} */
} dialect_t;

static const dialect_t V41 = {" calls", " invoke", " parameter", true, false, false, CHAT_JSON_PYTHON, NULL};
static const dialect_t V4 = {"tool_calls", "invoke", "parameter", false, true, true, CHAT_JSON_SPACED,
                             "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\n"
                             "Reply with JSON object ONLY."};

/* The reasoning-effort line that opens the prompt in thinking mode. */
static const char V41_EFFORT_FMT[] =
    "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
static const char V4_EFFORT_HIGH[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve "
    "the root cause, rigorously stress-testing your logic against all potential paths, edge cases, "
    "and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";
static const char V4_EFFORT_MAX[] =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles "
    "and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

/* The tool prompt. {D} is the ｜DSML｜ token, {C} {I} {P} the dialect's tag names, {T} and
 * {/T} the thinking tokens, {S} the tool schemas, one JSON object per line. */
static const char TOOL_PROMPT[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<{D}{C}>\" block like the following:\n\n"
    "<{D}{C}>\n"
    "<{D}{I} name=\"$TOOL_NAME\">\n"
    "<{D}{P} name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{D}{P}>\n"
    "...\n"
    "</{D}{I}>\n"
    "<{D}{I} name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</{D}{I}>\n"
    "</{D}{C}>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by {T}), you MUST output your complete reasoning inside "
    "{T}...{/T} BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after {/T} with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
    "{S}\n\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

typedef struct {
    chat_prompt_t *p;
    const dialect_t *d;
    const chat_conv_t *conv;
} renderer_t;

static void text(renderer_t *r, const void *s, size_t n) { buf_append(&r->p->text, s, n); }
static void text_s(renderer_t *r, const char *s) { buf_puts(&r->p->text, s); }

static void special(renderer_t *r, const char *tok) {
    chat_prompt_t *p = r->p;
    if (p->n_special == p->cap_special) {
        p->cap_special = p->cap_special ? 2 * p->cap_special : 32;
        p->special = xrealloc(p->special, p->cap_special * sizeof *p->special);
    }
    size_t start = p->text.len;
    buf_puts(&p->text, tok);
    p->special[p->n_special++] = (chat_span_t){start, p->text.len};
}

/* Assistant text: grounding-token spellings become tokens, the rest is plain. */
static void grounded(renderer_t *r, const buf_t *b) {
    if (!b->len) return;
    const char *s = (const char *)b->data;
    size_t n = b->len, from = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '<') continue;
        for (size_t g = 0; g < DI_ARRAY_LEN(GROUNDING); g++) {
            size_t len = strlen(GROUNDING[g]);
            if (len <= n - i && !memcmp(s + i, GROUNDING[g], len)) {
                text(r, s + from, i - from);
                special(r, GROUNDING[g]);
                i += len - 1;
                from = i + 1;
                break;
            }
        }
    }
    text(r, s + from, n - from);
}

static void tool_schemas(renderer_t *r) {
    for (size_t i = 0; i < r->conv->n_tools; i++) {
        const chat_tool_t *t = &r->conv->tools[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", chat_json_buf(&t->name));
        json_object_set_new(o, "description", chat_json_buf(&t->description));
        json_object_set(o, "parameters", t->parameters ? t->parameters : json_null());
        if (i) text_s(r, "\n");
        chat_json_write(&r->p->text, o, r->d->json);
        json_decref(o);
    }
}

static void tool_prompt(renderer_t *r) {
    const struct {
        const char *mark, *token, *text; /* neither token nor text: the tool schemas */
    } marks[] = {
        {"{D}", TOK_DSML, NULL}, {"{T}", TOK_THINK, NULL}, {"{/T}", TOK_UNTHINK, NULL}, {"{C}", NULL, r->d->calls},
        {"{I}", NULL, r->d->invoke}, {"{P}", NULL, r->d->parameter}, {"{S}", NULL, NULL},
    };
    for (const char *s = TOOL_PROMPT; *s;) {
        size_t plain = strcspn(s, "{");
        text(r, s, plain);
        s += plain;
        if (!*s) break;
        size_t m = 0;
        while (m < DI_ARRAY_LEN(marks) && strncmp(s, marks[m].mark, strlen(marks[m].mark))) m++;
        if (m == DI_ARRAY_LEN(marks)) {
            text(r, s++, 1); /* a brace that is no mark */
            continue;
        }
        if (marks[m].token) special(r, marks[m].token);
        else if (marks[m].text) text_s(r, marks[m].text);
        else tool_schemas(r);
        s += strlen(marks[m].mark);
    }
}

static void response_format(renderer_t *r) {
    const chat_conv_t *c = r->conv;
    if (c->format == CHAT_FORMAT_JSON_OBJECT && r->d->json_object_format) {
        text_s(r, r->d->json_object_format);
        return;
    }
    text_s(r, FORMAT_HEADER);
    if (c->format == CHAT_FORMAT_JSON_OBJECT) text_s(r, "{\"type\": \"json_object\"}");
    else chat_json_write(&r->p->text, c->schema, r->d->json);
}

/* "<｜DSML｜" + name: the opening of a DSML tag, '<' or "</" already written. */
static void dsml_tag(renderer_t *r, const char *open, const char *name) {
    text_s(r, open);
    special(r, TOK_DSML);
    text_s(r, name);
}

static void tool_arguments(renderer_t *r, const chat_call_t *c) {
    json_error_t jerr;
    json_t *args = json_loadb((const char *)c->arguments.data, c->arguments.len,
                              JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    bool object = args && json_is_object(args);
    const char *key;
    json_t *value;
    bool first = true;
    /* A call whose arguments are not a JSON object passes them on as one string. */
    json_t *fallback = object ? NULL : json_object();
    if (fallback) json_object_set_new(fallback, "arguments", chat_json_buf(&c->arguments));
    json_object_foreach(object ? args : fallback, key, value) {
        if (!first && !r->d->args_newline_after_each) text_s(r, "\n");
        first = false;
        dsml_tag(r, "<", r->d->parameter);
        text_s(r, " name=\"");
        text_s(r, key);
        text_s(r, json_is_string(value) ? "\" string=\"true\">" : "\" string=\"false\">");
        if (json_is_string(value)) text(r, json_string_value(value), json_string_length(value));
        else chat_json_write(&r->p->text, value, r->d->json);
        dsml_tag(r, "</", r->d->parameter);
        text_s(r, ">");
        if (r->d->args_newline_after_each) text_s(r, "\n");
    }
    json_decref(args);
    json_decref(fallback);
}

static void tool_calls(renderer_t *r, const chat_msg_t *m) {
    text_s(r, "\n\n");
    dsml_tag(r, "<", r->d->calls);
    text_s(r, ">\n");
    for (size_t i = 0; i < m->n_calls; i++) {
        if (i) text_s(r, "\n");
        dsml_tag(r, "<", r->d->invoke);
        text_s(r, " name=\"");
        text(r, m->calls[i].name.data, m->calls[i].name.len);
        text_s(r, "\">\n");
        tool_arguments(r, &m->calls[i]);
        if (!r->d->args_newline_after_each) text_s(r, "\n");
        dsml_tag(r, "</", r->d->invoke);
        text_s(r, ">");
    }
    text_s(r, "\n");
    dsml_tag(r, "</", r->d->calls);
    text_s(r, ">");
}

/* first: V4.1 writes a conversation's first message, if an assistant one, as if thinking
 * mode were off. */
static void assistant(renderer_t *r, const chat_msg_t *m, bool keep_reasoning, bool first) {
    bool thinking = r->conv->thinking && !(first && r->d->system_token);
    special(r, TOK_ASSISTANT);
    if (m->prefix) {
        /* Continue the message: open exactly as far as it got. */
        if (!thinking) {
            special(r, TOK_UNTHINK);
            grounded(r, &m->content);
        } else {
            special(r, TOK_THINK);
            grounded(r, &m->reasoning);
            if (m->content.len) {
                special(r, TOK_UNTHINK);
                grounded(r, &m->content);
            }
        }
        return;
    }
    if (thinking && keep_reasoning) {
        special(r, TOK_THINK);
        grounded(r, &m->reasoning);
    }
    special(r, TOK_UNTHINK);
    grounded(r, &m->content);
    if (m->n_calls) tool_calls(r, m);
    special(r, TOK_EOS);
}

static void effort_line(const chat_conv_t *c, const dialect_t *d, buf_t *out) {
    if (!c->thinking) return;
    if (d == &V41) {
        int level = c->effort == CHAT_EFFORT_LOW ? 50 : c->effort == CHAT_EFFORT_MAX ? 100 : 75;
        buf_printf(out, V41_EFFORT_FMT, level);
    } else if (c->effort == CHAT_EFFORT_MAX) {
        buf_puts(out, V4_EFFORT_MAX);
    } else if (c->effort != CHAT_EFFORT_LOW) {
        buf_puts(out, V4_EFFORT_HIGH);
    }
}

static bool user_like(const chat_msg_t *m) { return m && (m->role == CHAT_USER || m->role == CHAT_TOOL); }

/* Appends text to a joined message, a blank line between non-empty parts. */
static void join_text(buf_t *to, const buf_t *text) {
    if (to->len && text->len) buf_puts(to, "\n\n");
    buf_append(to, text->data, text->len);
}

static size_t call_position(const chat_msg_t *caller, const buf_t *id) {
    for (size_t k = 0; k < caller->n_calls; k++)
        if (chat_same(&caller->calls[k].id, id)) return k;
    return 0; /* an unknown id sorts with the first call */
}

/* Tool results in a run of user/tool messages are put in the order of the calls they answer
 * (the latest assistant's calls), keeping the places of the tool messages in the run. */
static void sort_tool_results(const chat_msg_t **msgs, size_t n) {
    const chat_msg_t *caller = NULL;
    size_t *slots = xmalloc((n + 1) * sizeof *slots), *keys = xmalloc((n + 1) * sizeof *keys);
    const chat_msg_t **tools = xmalloc((n + 1) * sizeof *tools);
    for (size_t i = 0; i < n;) {
        if (!user_like(msgs[i])) {
            if (msgs[i]->role == CHAT_ASSISTANT && msgs[i]->n_calls) caller = msgs[i];
            i++;
            continue;
        }
        size_t ns = 0;
        for (; i < n && user_like(msgs[i]); i++)
            if (msgs[i]->role == CHAT_TOOL) slots[ns++] = i;
        if (!caller) continue;
        /* Stable insertion sort by call position, then back into the slots. */
        for (size_t a = 0; a < ns; a++) {
            const chat_msg_t *t = msgs[slots[a]];
            size_t key = call_position(caller, &t->call_id), b = a;
            for (; b > 0 && keys[b - 1] > key; b--) {
                keys[b] = keys[b - 1];
                tools[b] = tools[b - 1];
            }
            keys[b] = key;
            tools[b] = t;
        }
        for (size_t a = 0; a < ns; a++) msgs[slots[a]] = tools[a];
    }
    free(slots);
    free(keys);
    free(tools);
}

void chat_render_conv(const chat_conv_t *conv, chat_prompt_t *p) {
    renderer_t r = {p, conv->model == CHAT_MODEL_V4 ? &V4 : &V41, conv};
    p->model = conv->model;

    /* The messages the template sees. V4 gathers the system messages into one at the head and
     * joins consecutive user messages; both joins skip empty texts. */
    static const chat_msg_t empty_system = {.role = CHAT_SYSTEM};
    const chat_msg_t **msgs = xmalloc((conv->n_msgs + 1) * sizeof *msgs);
    chat_msg_t *joined = xcalloc(conv->n_msgs + 1, sizeof *joined); /* messages made by joining */
    size_t n = 0, n_joined = 0;
    if (!r.d->system_token) {
        for (size_t i = 0; i < conv->n_msgs; i++) {
            const chat_msg_t *m = &conv->msgs[i];
            if (m->role != CHAT_SYSTEM) continue;
            if (!n_joined) {
                joined[n_joined].role = CHAT_SYSTEM;
                msgs[n++] = &joined[n_joined++];
            }
            join_text(&joined[0].content, &m->content);
        }
    }
    chat_msg_t *open_user = NULL; /* the joined user message still growing */
    for (size_t i = 0; i < conv->n_msgs; i++) {
        const chat_msg_t *m = &conv->msgs[i];
        if (!r.d->system_token && m->role == CHAT_SYSTEM) continue;
        if (r.d->merge_users && m->role == CHAT_USER && n && msgs[n - 1]->role == CHAT_USER) {
            if (!open_user) {
                open_user = &joined[n_joined++];
                open_user->role = CHAT_USER;
                join_text(&open_user->content, &msgs[n - 1]->content);
                msgs[n - 1] = open_user;
            }
            join_text(&open_user->content, &m->content);
            continue;
        }
        open_user = NULL;
        msgs[n++] = m;
    }

    bool has_tools = conv->choice != CHAT_CHOICE_NONE && conv->n_tools > 0;
    bool has_format = conv->format == CHAT_FORMAT_JSON_OBJECT || conv->format == CHAT_FORMAT_JSON_SCHEMA;
    if ((has_tools || has_format) && (n == 0 || msgs[0]->role != CHAT_SYSTEM)) {
        memmove(msgs + 1, msgs, n * sizeof *msgs);
        msgs[0] = &empty_system;
        n++;
    }
    sort_tool_results(msgs, n);

    /* The reasoning-effort line: V4 writes it after BOS, V4.1 with the first message, in a
     * <｜System｜> section that the first message continues if it is a system one. */
    buf_t effort = {0};
    effort_line(conv, r.d, &effort);
    special(&r, TOK_BOS);
    if (!r.d->system_token) text(&r, effort.data, effort.len);
    for (size_t i = 0; i < n; i++) {
        const chat_msg_t *m = msgs[i];
        const chat_msg_t *prev = i ? msgs[i - 1] : NULL;
        if (i == 0 && r.d->system_token) {
            if (effort.len || m->role == CHAT_SYSTEM) special(&r, TOK_SYSTEM);
            text(&r, effort.data, effort.len);
        }
        switch (m->role) {
        case CHAT_SYSTEM:
            if (i > 0) special(&r, TOK_SYSTEM);
            text(&r, m->content.data, m->content.len);
            if (i == 0 && has_tools) {
                text_s(&r, "\n\n");
                tool_prompt(&r);
            }
            if (i == 0 && has_format) response_format(&r);
            break;
        case CHAT_USER:
        case CHAT_TOOL:
            if (user_like(prev)) text_s(&r, "\n\n");
            else special(&r, TOK_USER);
            if (m->role == CHAT_TOOL) text_s(&r, "<tool_result>");
            text(&r, m->content.data, m->content.len);
            if (m->role == CHAT_TOOL) text_s(&r, "</tool_result>");
            break;
        case CHAT_LATEST_REMINDER:
            special(&r, TOK_REMINDER);
            text(&r, m->content.data, m->content.len);
            break;
        case CHAT_ASSISTANT: assistant(&r, m, has_tools, i == 0); break;
        }
    }
    if (!(n && msgs[n - 1]->role == CHAT_ASSISTANT && msgs[n - 1]->prefix)) {
        special(&r, TOK_ASSISTANT);
        special(&r, conv->thinking ? TOK_THINK : TOK_UNTHINK);
        if (conv->choice == CHAT_CHOICE_REQUIRED && conv->n_tools > 0) {
            text_s(&r, "\n\n");
            dsml_tag(&r, "<", r.d->calls);
            text_s(&r, ">\n");
        }
    }
    buf_free(&effort);
    for (size_t i = 0; i < n_joined; i++) buf_free(&joined[i].content);
    free(joined);
    free(msgs);
}
