/* libFuzzer target: the chat renderer on arbitrary JSON (seeds: the bodies of
 * tests/data/chat_cases.jsonl). A rendered prompt must start with BOS and its special spans
 * must be ascending, disjoint, inside the text and each spell a token; a refusal must say why. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

static const char *const TOKENS[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜System｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜", "<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>",
    "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>",
};

static bool is_token(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < sizeof TOKENS / sizeof *TOKENS; i++)
        if (strlen(TOKENS[i]) == n && !memcmp(s, TOKENS[i], n)) return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, &jerr);
    if (!body) return 0;
    chat_prompt_t p;
    char err[256] = "";
    if (chat_render(body, &p, err, sizeof err) == 0) {
        if (!p.n_special || p.special[0].start != 0) abort();
        size_t at = 0;
        for (size_t i = 0; i < p.n_special; i++) {
            const chat_span_t *s = &p.special[i];
            if (s->start < at || s->end <= s->start || s->end > p.text.len) abort();
            if (!is_token(p.text.data + s->start, s->end - s->start)) abort();
            at = s->end;
        }
        if (p.thinking != (p.stage != CHAT_STAGE_NONE)) abort();
    } else if (!err[0]) {
        abort();
    }
    chat_prompt_free(&p);
    json_decref(body);
    return 0;
}
