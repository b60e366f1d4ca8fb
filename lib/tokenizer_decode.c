/* Ids back to bytes: the byte-level alphabet, and the lookups on the decoded-token table
 * that tokenizer_load fills. */
#include "tokenizer_internal.h"

#include <string.h>

/* GPT-2's bytes_to_unicode: the printable bytes of Latin-1 stand for themselves; the 68
 * others (0x00-0x20, 0x7F-0xA0, 0xAD), in order, for U+0100 to U+0143. */
uint32_t byte_level_char(uint8_t b)
{
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    if (b == 0xAD) return 0x100 + 67;
    return b;
}

/* The byte a code point stands for, or -1 if it is not one of the 256. */
static int byte_level_byte(uint32_t cp)
{
    if (cp < 0x100) return byte_level_char((uint8_t)cp) == cp ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

/* Decodes one UTF-8 sequence of the (already validated) token text. */
static uint32_t next_code_point(const uint8_t *s, size_t *i)
{
    uint8_t c = s[(*i)++];
    if (c < 0x80) return c;
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (0x3F >> extra);
    while (extra--) cp = cp << 6 | (s[(*i)++] & 0x3F);
    return cp;
}

void byte_level_decode_token(const char *text, size_t len, buf_t *out)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t start = out->len;
    for (size_t i = 0; i < len;) {
        int b = byte_level_byte(next_code_point(s, &i));
        if (b < 0) {
            out->len = start;
            buf_append(out, text, len);
            return;
        }
        buf_putc(out, (uint8_t)b);
    }
}

uint32_t tokenizer_vocab_size(const tokenizer_t *t)
{
    return t->vocab_size;
}

const uint8_t *tokenizer_token_bytes(const tokenizer_t *t, uint32_t id, size_t *len)
{
    if (id >= t->vocab_size || !t->has_token[id]) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->pool + t->off[id];
}

bool tokenizer_is_special(const tokenizer_t *t, uint32_t id)
{
    return id < t->vocab_size && t->special[id];
}

int64_t tokenizer_added_id(const tokenizer_t *t, const char *text, size_t len)
{
    int64_t id = added_trie_lookup(&t->raw_added, (const uint8_t *)text, len);
    return id >= 0 ? id : added_trie_lookup(&t->normalized_added, (const uint8_t *)text, len);
}

int tokenizer_decode(const tokenizer_t *t, const uint32_t *ids, size_t n, buf_t *out)
{
    size_t start = out->len;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *p = tokenizer_token_bytes(t, ids[i], &len);
        if (!p) {
            out->len = start;
            return -1;
        }
        buf_append(out, p, len);
    }
    return 0;
}
