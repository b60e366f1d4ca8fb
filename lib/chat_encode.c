/* Rendered prompt -> token ids: the special spans are single added tokens, the text between
 * them is plain text, so a special-token spelling typed by a user stays ordinary text. */
#include "chat.h"

#include <stdio.h>

int chat_encode(const tokenizer_t *tok, const chat_prompt_t *p, ids_t *out, char *err, size_t errlen) {
    const char *s = (const char *)p->text.data;
    size_t at = 0;
    for (size_t i = 0; i <= p->n_special; i++) {
        size_t end = i < p->n_special ? p->special[i].start : p->text.len;
        if (end > at && tokenizer_encode(tok, s + at, end - at, out) < 0) {
            snprintf(err, errlen, "prompt text at byte %zu is not valid UTF-8", at);
            return -1;
        }
        if (i == p->n_special) break;
        const chat_span_t *sp = &p->special[i];
        int64_t id = tokenizer_added_id(tok, s + sp->start, sp->end - sp->start);
        if (id < 0) {
            snprintf(err, errlen, "special token \"%.*s\" is not in the tokenizer's added vocabulary",
                     (int)(sp->end - sp->start), s + sp->start);
            return -1;
        }
        ids_push(out, (uint32_t)id);
        at = sp->end;
    }
    return 0;
}
