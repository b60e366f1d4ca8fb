/* The parser is a set of stages. Each stage has an ordered list of branches (markers it
 * watches for) and one action for ordinary text. Bytes are fed one at a time to every branch;
 * the first branch to complete wins: the text before its marker gets the stage's action, the
 * marker gets the branch's action, and the branch's stage begins afresh. Text that is still a
 * partial match of some branch is held back; the rest gets the stage's action at once. */
#include "outparse.h"

#include "kmp.h"

#include <stdlib.h>
#include <string.h>

enum {
    S_PLAIN,        /* raw completion */
    S_ANSWER,       /* answer text; flag: leading newlines are still dropped */
    S_JSON,         /* JSON mode, inside the JSON */
    S_AFTER_JSON,   /* JSON mode, after the JSON */
    S_CALLS,        /* inside the tool-call block, between calls */
    S_CALL_NAME,
    S_ARGS,         /* inside a call, between parameters; flag: no parameter yet */
    S_PARAM_NAME,
    S_PARAM_TYPE,
    S_PARAM_VALUE,  /* flag: a string value */
    S_REASONING,    /* flag: leading newlines are still dropped */
    S_FINISHED,     /* output over: the rest is dropped */
};

enum {
    A_RAW,          /* answer text */
    A_TO_SPACE,     /* JSON mode: a run of text outside the JSON becomes one space */
    A_SKIP,
    A_STOP,
    A_CALL_BEGIN,
    A_NAME,
    A_NAME_END,
    A_ARGS_LABEL,   /* fixed text into the arguments */
    A_ARGS_RAW,     /* text copied into the arguments */
    A_ARGS_STRING,  /* text JSON-escaped into the arguments */
    A_REASONING,
    A_LABEL,        /* fixed text into the answer */
};

enum {
    M_DSML_BEGIN,
    M_DSML_END,
    M_THINK_END,
    M_CALLS_END_V4,
    M_CALLS_END,
    M_INVOKE,
    M_QUOTE,
    M_PARAM,
    M_SPACE,
    M_TRUE,
    M_FALSE,
    M_JSON_FENCE,
    M_FENCE,
    M_BRACE,
    M_BRACKET,
    M_FENCE_END,
    M_COUNT,        /* the stop strings follow */
};

static const char *const MARKERS[M_COUNT] = {
    [M_DSML_BEGIN] = "<｜DSML｜",
    [M_DSML_END] = "</｜DSML｜",
    [M_THINK_END] = "</think>",
    [M_CALLS_END_V4] = "</｜DSML｜tool_calls>",
    [M_CALLS_END] = "</｜DSML｜ calls>",
    [M_INVOKE] = "invoke name=\"",
    [M_QUOTE] = "\"",
    [M_PARAM] = "parameter name=",
    [M_SPACE] = " ",
    [M_TRUE] = "true\">",
    [M_FALSE] = "false\">",
    [M_JSON_FENCE] = "```json\n",
    [M_FENCE] = "```\n",
    [M_BRACE] = "{",
    [M_BRACKET] = "[",
    [M_FENCE_END] = "\n```",
};

typedef enum {
    B_LITERAL,
    B_NEWLINES_LITERAL, /* any number of newlines, then the literal */
    B_LEADING_NEWLINE,  /* a newline as the stage's first byte */
} branch_kind_t;

typedef struct {
    branch_kind_t kind;
    const kmp_t *pat;
    size_t matched;     /* bytes of pat the text ends with */
    size_t newlines;    /* B_NEWLINES_LITERAL: newlines counted before the literal */
    bool fed;           /* B_LEADING_NEWLINE: the first byte has gone by */
    int next_stage;
    bool next_flag;
    int action;
    const char *label;
} branch_t;

struct outparse_state {
    kmp_t *markers;     /* M_COUNT fixed markers, then the stop strings */
    size_t n_stop;
    bool json, tools;
    int stage;
    bool flag;
    branch_t *branches;
    size_t n_branches;
    int unmatched;      /* action on text no branch claims */
    buf_t held;         /* text not given an action yet */
    bool space_run;     /* A_TO_SPACE: the current run already gave its space */
    buf_t name;         /* tool name being read */
};

static void add(struct outparse_state *st, branch_kind_t kind, size_t marker, int next_stage, bool next_flag,
                int action, const char *label)
{
    st->branches[st->n_branches++] = (branch_t){
        .kind = kind,
        .pat = &st->markers[marker],
        .next_stage = next_stage,
        .next_flag = next_flag,
        .action = action,
        .label = label,
    };
}

static void add_literal(struct outparse_state *st, size_t marker, int next_stage, bool next_flag, int action,
                        const char *label)
{
    add(st, B_LITERAL, marker, next_stage, next_flag, action, label);
}

static void add_stops(struct outparse_state *st)
{
    for (size_t i = 0; i < st->n_stop; i++) add_literal(st, M_COUNT + i, S_FINISHED, false, A_STOP, NULL);
}

static void add_calls_begin(struct outparse_state *st)
{
    if (st->tools) add(st, B_NEWLINES_LITERAL, M_DSML_BEGIN, S_CALLS, false, A_SKIP, NULL);
}

/* The transition table: which markers each stage watches, in priority order. */
static void enter(struct outparse_state *st, int stage, bool flag)
{
    st->stage = stage;
    st->flag = flag;
    st->n_branches = 0;
    st->space_run = false;
    switch (stage) {
    case S_PLAIN:
        add_stops(st);
        st->unmatched = A_RAW;
        break;
    case S_ANSWER:
        if (st->json) {
            add_literal(st, M_JSON_FENCE, S_JSON, false, A_SKIP, NULL);
            add_literal(st, M_FENCE, S_JSON, false, A_SKIP, NULL);
            add_literal(st, M_BRACE, S_JSON, false, A_LABEL, "{");
            add_literal(st, M_BRACKET, S_JSON, false, A_LABEL, "[");
        } else
            add_stops(st);
        add_calls_begin(st);
        if (flag) add(st, B_LEADING_NEWLINE, 0, S_ANSWER, true, A_SKIP, NULL);
        add_literal(st, M_THINK_END, S_ANSWER, false, A_SKIP, NULL); /* stray: dropped */
        st->unmatched = st->json ? A_TO_SPACE : A_RAW;
        break;
    case S_JSON:
        add_stops(st);
        add_literal(st, M_FENCE_END, S_AFTER_JSON, false, A_SKIP, NULL);
        st->unmatched = A_RAW;
        break;
    case S_AFTER_JSON:
        add_calls_begin(st);
        st->unmatched = A_TO_SPACE;
        break;
    case S_CALLS:
        add_literal(st, M_INVOKE, S_CALL_NAME, false, A_CALL_BEGIN, NULL);
        add_literal(st, M_CALLS_END_V4, S_FINISHED, false, A_SKIP, NULL);
        add_literal(st, M_CALLS_END, S_FINISHED, false, A_SKIP, NULL);
        st->unmatched = A_SKIP;
        break;
    case S_CALL_NAME:
        add_literal(st, M_QUOTE, S_ARGS, true, A_NAME_END, NULL);
        st->unmatched = A_NAME;
        break;
    case S_ARGS:
        add_literal(st, M_PARAM, S_PARAM_NAME, false, A_ARGS_LABEL, flag ? "{" : ", ");
        add_literal(st, M_DSML_END, S_CALLS, false, A_ARGS_LABEL, flag ? "{}" : "}");
        st->unmatched = A_SKIP;
        break;
    case S_PARAM_NAME:
        add_literal(st, M_SPACE, S_PARAM_TYPE, false, A_ARGS_LABEL, ": ");
        st->unmatched = A_ARGS_RAW;
        break;
    case S_PARAM_TYPE:
        add_literal(st, M_TRUE, S_PARAM_VALUE, true, A_ARGS_LABEL, "\"");
        add_literal(st, M_FALSE, S_PARAM_VALUE, false, A_SKIP, NULL);
        st->unmatched = A_SKIP;
        break;
    case S_PARAM_VALUE:
        add_literal(st, M_DSML_END, S_ARGS, false, flag ? A_ARGS_LABEL : A_SKIP, "\"");
        st->unmatched = flag ? A_ARGS_STRING : A_ARGS_RAW;
        break;
    case S_REASONING:
        add_calls_begin(st);
        if (flag) add(st, B_LEADING_NEWLINE, 0, S_REASONING, true, A_SKIP, NULL);
        add(st, B_NEWLINES_LITERAL, M_THINK_END, S_ANSWER, true, A_SKIP, NULL);
        st->unmatched = A_REASONING;
        break;
    case S_FINISHED:
        st->unmatched = A_SKIP;
        break;
    }
}

void outparse_init(outparse_t *p, const outparse_opts_t *opts)
{
    memset(p, 0, sizeof *p);
    struct outparse_state *st = p->st = xcalloc(1, sizeof *st);
    st->json = opts->json;
    st->tools = opts->tools;
    st->markers = xcalloc(M_COUNT + opts->n_stop, sizeof *st->markers);
    for (size_t i = 0; i < M_COUNT; i++) kmp_init(&st->markers[i], MARKERS[i], strlen(MARKERS[i]));
    for (uint32_t i = 0; i < opts->n_stop; i++)
        if (opts->stop[i][0]) {
            kmp_init(&st->markers[M_COUNT + st->n_stop], opts->stop[i], strlen(opts->stop[i]));
            st->n_stop++;
        }
    st->branches = xcalloc(st->n_stop + 8, sizeof *st->branches); /* the largest stage adds 7 */
    if (opts->plain)
        enter(st, S_PLAIN, false);
    else if (opts->in_tool_calls)
        enter(st, S_CALLS, false);
    else
        enter(st, opts->thinking ? S_REASONING : S_ANSWER, !opts->continuation);
}

void outparse_free(outparse_t *p)
{
    struct outparse_state *st = p->st;
    if (st) {
        for (size_t i = 0; i < M_COUNT + st->n_stop; i++) kmp_free(&st->markers[i]);
        free(st->markers);
        free(st->branches);
        buf_free(&st->held);
        buf_free(&st->name);
        free(st);
    }
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        buf_free(&p->calls[i].args);
    }
    free(p->calls);
    buf_free(&p->content);
    buf_free(&p->reasoning);
    memset(p, 0, sizeof *p);
}

/* Appends s as the inside of a JSON string, escaped the way serde_json writes it. */
static void append_json_escaped(buf_t *b, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        switch (c) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\b': buf_puts(b, "\\b"); break;
        case '\f': buf_puts(b, "\\f"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\r': buf_puts(b, "\\r"); break;
        case '\t': buf_puts(b, "\\t"); break;
        default:
            if (c < 0x20)
                buf_printf(b, "\\u%04x", c);
            else
                buf_putc(b, c);
        }
    }
}

static buf_t *current_args(outparse_t *p)
{
    return &p->calls[p->n_calls - 1].args;
}

static void apply(outparse_t *p, int action, const char *label, const uint8_t *s, size_t n)
{
    struct outparse_state *st = p->st;
    switch (action) {
    case A_RAW: buf_append(&p->content, s, n); break;
    case A_TO_SPACE:
        if (!st->space_run) buf_putc(&p->content, ' ');
        st->space_run = true;
        break;
    case A_SKIP: break;
    case A_STOP: p->stopped = true; break;
    case A_CALL_BEGIN: buf_clear(&st->name); break;
    case A_NAME: buf_append(&st->name, s, n); break;
    case A_NAME_END:
        p->calls = xrealloc(p->calls, (p->n_calls + 1) * sizeof *p->calls);
        p->calls[p->n_calls++] = (outparse_call_t){.name = xstrdup(buf_cstr(&st->name))};
        break;
    case A_ARGS_LABEL: buf_puts(current_args(p), label); break;
    case A_ARGS_RAW: buf_append(current_args(p), s, n); break;
    case A_ARGS_STRING: append_json_escaped(current_args(p), s, n); break;
    case A_REASONING: buf_append(&p->reasoning, s, n); break;
    case A_LABEL: buf_puts(&p->content, label); break;
    }
}

/* Feeds one byte to a branch; true when its marker is complete. */
static bool branch_feed(branch_t *b, uint8_t c)
{
    switch (b->kind) {
    case B_LITERAL:
        b->matched = kmp_step(b->pat, b->matched, c);
        break;
    case B_NEWLINES_LITERAL:
        if (!b->matched && c == '\n')
            b->newlines++;
        else {
            size_t next = kmp_step(b->pat, b->matched, c);
            if (next <= b->matched) b->newlines = 0; /* no progress: the newlines no longer lead up to it */
            b->matched = next;
        }
        break;
    case B_LEADING_NEWLINE: {
        bool first = !b->fed;
        b->fed = true;
        return first && c == '\n';
    }
    }
    return b->matched == b->pat->len;
}

/* Bytes at the end of the held text that the branch has matched so far. */
static size_t branch_pending(const branch_t *b)
{
    return b->kind == B_LEADING_NEWLINE ? 0 : b->matched + b->newlines;
}

static void take(outparse_t *p, const branch_t *b)
{
    struct outparse_state *st = p->st;
    size_t len = b->kind == B_LEADING_NEWLINE ? 1 : b->matched + b->newlines;
    size_t before = st->held.len - len;
    if (before) apply(p, st->unmatched, NULL, st->held.data, before);
    apply(p, b->action, b->label, st->held.data + before, len);
    st->held.len = 0;
    enter(st, b->next_stage, b->next_flag);
}

bool outparse_push(outparse_t *p, const char *text, size_t len)
{
    struct outparse_state *st = p->st;
    for (size_t i = 0; i < len; i++) {
        buf_putc(&st->held, (uint8_t)text[i]);
        for (size_t j = 0; j < st->n_branches; j++)
            if (branch_feed(&st->branches[j], (uint8_t)text[i])) {
                branch_t b = st->branches[j]; /* enter() rewrites the table */
                take(p, &b);
                break;
            }
    }
    size_t pending = 0;
    for (size_t j = 0; j < st->n_branches; j++) {
        size_t n = branch_pending(&st->branches[j]);
        if (n > pending) pending = n;
    }
    size_t ready = st->held.len - pending;
    if (ready) {
        apply(p, st->unmatched, NULL, st->held.data, ready);
        memmove(st->held.data, st->held.data + ready, pending);
        st->held.len = pending;
    }
    return p->stopped;
}

void outparse_finish(outparse_t *p)
{
    struct outparse_state *st = p->st;
    if (st->held.len) apply(p, st->unmatched, NULL, st->held.data, st->held.len);
    st->held.len = 0;
}
