#include "utf8stream.h"

static const char REPLACEMENT[] = "\xef\xbf\xbd"; /* U+FFFD */

/* Length of the character a lead byte starts, 0 if it cannot start one. */
static size_t lead_length(uint8_t c)
{
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

/* Whether c may follow `lead` as its second byte: the ranges that exclude overlong forms,
 * surrogates and code points above U+10FFFF. Later bytes are plain 80..BF. */
static bool second_ok(uint8_t lead, uint8_t c)
{
    uint8_t lo = 0x80, hi = 0xbf;
    if (lead == 0xe0) lo = 0xa0;
    else if (lead == 0xed) hi = 0x9f;
    else if (lead == 0xf0) lo = 0x90;
    else if (lead == 0xf4) hi = 0x8f;
    return c >= lo && c <= hi;
}

void utf8stream_push(utf8stream_t *s, const uint8_t *bytes, size_t n, buf_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = bytes[i];
        if (s->npend) {
            bool fits = s->npend == 1 ? second_ok(s->pend[0], c) : (c & 0xc0) == 0x80;
            if (fits) {
                s->pend[s->npend++] = c;
                if (s->npend == s->need) {
                    buf_append(out, s->pend, s->npend);
                    s->npend = 0;
                }
                continue;
            }
            /* The pending bytes are a maximal subpart: one replacement, then c starts afresh. */
            buf_puts(out, REPLACEMENT);
            s->npend = 0;
        }
        size_t len = lead_length(c);
        if (len == 1)
            buf_putc(out, c);
        else if (len == 0)
            buf_puts(out, REPLACEMENT);
        else {
            s->pend[0] = c;
            s->npend = 1;
            s->need = len;
        }
    }
}

void utf8stream_finish(utf8stream_t *s, buf_t *out)
{
    if (s->npend) buf_puts(out, REPLACEMENT);
    s->npend = 0;
}
