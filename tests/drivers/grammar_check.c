/* Test driver for the grammar engine: tests/py/test_grammar_*.py send it one JSON line per
 * job and get one JSON line back. The vocabulary is the real one (data/tokenizer).
 *
 *   grammar_check [tokenizer.json] < jobs.jsonl > results.jsonl
 *
 * Jobs: {"op": ..., "kind": "regex"|"json_schema"|"json_object", "constraint": str}
 *   "compile": {"ok": true, "hash": hex, "canonical": str, "states", "rules"} or {"error": str}
 *   "match":   also "inputs": [str] -> {"results": [bool]}: whole-output check of each, and
 *              for regexes "pcre2": [bool], PCRE2's full match of each
 *   "gen":     also "seeds": [int], optional "max_tokens", "steer_after", "think_tokens",
 *              "thinking" (see grammar_walk in grammar.h: the model loop with random choices)
 *              -> {"outputs": [answer text], "reasoning": [text], "finished": [bool],
 *                  "tokens": [int]}, and for regexes "pcre2": [bool] on the outputs
 *   "replay":  also "outputs": [[token id]] (a model's outputs), optional "thinking": each
 *              replayed through a matcher -> {"accepted": [bool]: every token allowed in turn,
 *              "complete": [bool]: the answer is a complete match, "answers": [text], and for
 *              regexes "pcre2_partial": [bool]: PCRE2 says the answer is a match or a prefix of
 *              one (partial-hard match) */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "grammar.h"
#include "tokenizer.h"
#include "utf8.h"
#include "util.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static constraint_kind_t kind_of(const char *s)
{
    if (s && !strcmp(s, "regex")) return CONSTRAINT_REGEX;
    if (s && !strcmp(s, "json_schema")) return CONSTRAINT_JSON_SCHEMA;
    if (s && !strcmp(s, "json_object")) return CONSTRAINT_JSON_OBJECT;
    return CONSTRAINT_NONE;
}

/* PCRE2 full match (UTF, anchored at both ends, $ only at the very end) of each string;
 * partial: or the string can be continued into one. */
static json_t *pcre2_test(const char *pattern, json_t *strings, bool partial)
{
    int code;
    PCRE2_SIZE off;
    /* partial matching does not combine with PCRE2_ENDANCHORED: the end is \z in the pattern */
    buf_t pat = {0};
    buf_printf(&pat, partial ? "(?:%s)\\z" : "%s", pattern);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat.data, pat.len, PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY |
                                   (partial ? 0 : PCRE2_ENDANCHORED), &code, &off, NULL);
    buf_free(&pat);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    json_t *res = json_array();
    for (size_t i = 0; i < json_array_size(strings); i++) {
        json_t *s = json_array_get(strings, i);
        int rc = re ? pcre2_match(re, (PCRE2_SPTR)json_string_value(s), json_string_length(s), 0,
                                  partial ? PCRE2_PARTIAL_HARD : 0, md, NULL)
                    : -1;
        bool ok = rc >= 0 || (partial && rc == PCRE2_ERROR_PARTIAL);
        json_array_append_new(res, json_boolean(ok));
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return res;
}

/* An unfinished output may end inside a character: drop the cut-off bytes. */
static json_t *text_value(const buf_t *b)
{
    size_t n = b->len;
    while (n && !utf8_valid((const char *)b->data, n)) n--;
    return json_stringn(n ? (const char *)b->data : "", n);
}

typedef struct {
    const tokenizer_t *tok;
    grammar_vocab_t *vocab;
    uint32_t eos, think_end;
} ctx_t;

static json_t *gen(ctx_t *x, grammar_t *g, json_t *job)
{
    json_t *seeds = json_object_get(job, "seeds");
    grammar_walk_opts_t o = {
        .max_tokens = (uint32_t)json_integer_value(json_object_get(job, "max_tokens")),
        .steer_after = (uint32_t)json_integer_value(json_object_get(job, "steer_after")),
        .think_tokens = (uint32_t)json_integer_value(json_object_get(job, "think_tokens")),
        .thinking = json_is_true(json_object_get(job, "thinking")),
    };
    json_t *outs = json_array(), *fin = json_array(), *ntok = json_array(), *reasons = json_array();
    for (size_t i = 0; i < json_array_size(seeds); i++) {
        o.seed = (uint64_t)json_integer_value(json_array_get(seeds, i));
        grammar_walk_t w;
        grammar_walk(g, &o, &w);
        buf_t out = {0}, reasoning = {0};
        for (size_t k = 0; k < w.tokens.n; k++) {
            uint32_t id = w.tokens.v[k];
            if (id == x->eos || id == x->think_end) continue;
            tokenizer_decode(x->tok, &id, 1, k < w.answer_start ? &reasoning : &out);
        }
        json_array_append_new(outs, text_value(&out));
        json_array_append_new(reasons, text_value(&reasoning));
        json_array_append_new(fin, json_boolean(w.finished));
        json_array_append_new(ntok, json_integer((json_int_t)w.tokens.n));
        buf_free(&out);
        buf_free(&reasoning);
        grammar_walk_free(&w);
    }
    json_t *r = json_pack("{s:o, s:o, s:o, s:o}", "outputs", outs, "finished", fin, "tokens", ntok, "reasoning", reasons);
    if (grammar_kind(g) == CONSTRAINT_REGEX) json_object_set_new(r, "pcre2", pcre2_test(grammar_canonical(g), outs, false));
    return r;
}

static json_t *replay(ctx_t *x, grammar_t *g, json_t *job)
{
    json_t *outputs = json_object_get(job, "outputs"), *acc = json_array(), *done = json_array(), *answers = json_array();
    bool thinking = json_is_true(json_object_get(job, "thinking"));
    for (size_t i = 0; i < json_array_size(outputs); i++) {
        json_t *ids = json_array_get(outputs, i);
        grammar_matcher_t *m = grammar_matcher_new(g, thinking);
        bool ok = true;
        buf_t answer = {0};
        for (size_t k = 0; k < json_array_size(ids) && ok; k++) {
            uint32_t id = (uint32_t)json_integer_value(json_array_get(ids, k));
            bool in_answer = !grammar_matcher_in_reasoning(m);
            ok = grammar_matcher_accept(m, id);
            if (ok && in_answer && id != x->eos) tokenizer_decode(x->tok, &id, 1, &answer);
        }
        json_array_append_new(acc, json_boolean(ok));
        json_array_append_new(done, json_boolean(ok && grammar_matcher_is_accepting(m)));
        json_array_append_new(answers, text_value(&answer));
        buf_free(&answer);
        grammar_matcher_free(m);
    }
    json_t *r = json_pack("{s:o, s:o, s:o}", "accepted", acc, "complete", done, "answers", answers);
    if (grammar_kind(g) == CONSTRAINT_REGEX)
        json_object_set_new(r, "pcre2_partial", pcre2_test(grammar_canonical(g), json_object_get(r, "answers"), true));
    return r;
}

static json_t *run(ctx_t *x, json_t *job)
{
    const char *op = json_string_value(json_object_get(job, "op"));
    constraint_kind_t kind = kind_of(json_string_value(json_object_get(job, "kind")));
    const char *text = json_string_value(json_object_get(job, "constraint"));
    char err[1024];
    bool masks = op && (!strcmp(op, "gen") || !strcmp(op, "replay"));
    grammar_t *g = grammar_compile(x->vocab, kind, text, masks, err, sizeof err);
    if (!g) return json_pack("{s:s}", "error", err);
    json_t *r;
    if (op && !strcmp(op, "match")) {
        json_t *inputs = json_object_get(job, "inputs"), *res = json_array();
        for (size_t i = 0; i < json_array_size(inputs); i++) {
            json_t *s = json_array_get(inputs, i);
            json_array_append_new(res, json_boolean(grammar_match_bytes(g, (const uint8_t *)json_string_value(s), json_string_length(s))));
        }
        r = json_pack("{s:o}", "results", res);
        if (kind == CONSTRAINT_REGEX) json_object_set_new(r, "pcre2", pcre2_test(text, inputs, false));
    } else if (!strcmp(op ? op : "", "replay")) {
        r = replay(x, g, job);
    } else if (masks) {
        r = gen(x, g, job);
    } else {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)grammar_hash(g));
        grammar_stats_t st = grammar_stats(g);
        r = json_pack("{s:b, s:s, s:s?, s:i, s:i}", "ok", 1, "hash", hex, "canonical", grammar_canonical(g), "states",
                      (json_int_t)st.states, "rules", (json_int_t)st.rules);
    }
    grammar_unref(g);
    return r;
}

int main(int argc, char **argv)
{
    char err[512];
    const char *path = argc > 1 ? argv[1] : tokenizer_default_path();
    tokenizer_t *tok = tokenizer_load(path, err, sizeof err);
    if (!tok) die("cannot load %s: %s", path, err);
    ctx_t x = {tok, grammar_vocab_from_tokenizer(tok), 0, 0};
    x.eos = (uint32_t)tokenizer_added_id(tok, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", 27);
    x.think_end = (uint32_t)tokenizer_added_id(tok, "</think>", 8);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t jerr;
        json_t *job = json_loadb(line, (size_t)n, 0, &jerr);
        json_t *r = job ? run(&x, job) : json_pack("{s:s}", "error", jerr.text);
        char *s = json_dumps(r, JSON_COMPACT);
        printf("%s\n", s);
        fflush(stdout);
        free(s);
        json_decref(r);
        json_decref(job);
    }
    free(line);
    grammar_vocab_free(x.vocab);
    tokenizer_free(tok);
    return 0;
}
