/* The vocabulary seen by the grammar: token bytes in a depth-first trie (so a dead prefix
 * skips its whole subtree), the "plain" tokens (text that can sit inside any JSON string
 * or free-text run) and a second trie of the rest, which is all a free-text state has to
 * walk. Added tokens never take part in constrained output. */
#include "grammar_internal.h"
#include "hash64.h"

#include <stdlib.h>
#include <string.h>

/* Valid UTF-8 from a character boundary, where the last character may be cut short; counts
 * the characters begun. */
static bool utf8_prefix_valid(const uint8_t *p, size_t n, uint32_t *chars)
{
    *chars = 0;
    for (size_t i = 0; i < n;) {
        uint8_t b = p[i];
        size_t need;
        uint8_t lo2 = 0x80, hi2 = 0xBF;
        if (b < 0x80) need = 1;
        else if (b >= 0xC2 && b <= 0xDF) need = 2;
        else if (b >= 0xE0 && b <= 0xEF) {
            need = 3;
            if (b == 0xE0) lo2 = 0xA0;
            if (b == 0xED) hi2 = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 4;
            if (b == 0xF0) lo2 = 0x90;
            if (b == 0xF4) hi2 = 0x8F;
        } else {
            return false;
        }
        (*chars)++;
        for (size_t k = 1; k < need; k++) {
            if (i + k >= n) return true; /* cut short at the end: fine */
            uint8_t c = p[i + k];
            if (k == 1 ? (c < lo2 || c > hi2) : (c < 0x80 || c > 0xBF)) return false;
        }
        i += need;
    }
    return true;
}

static bool token_is_plain(const uint8_t *p, size_t n, uint32_t *chars)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == '"' || p[i] == '\\') return false;
    return utf8_prefix_valid(p, n, chars);
}

static int cmp_tokens(const void *a, const void *b, void *ctx)
{
    const grammar_vocab_t *v = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint32_t lx = v->lens[x], ly = v->lens[y];
    int c = memcmp(v->bytes[x], v->bytes[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static bool same_bytes(const grammar_vocab_t *v, uint32_t a, uint32_t b)
{
    return v->lens[a] == v->lens[b] && !memcmp(v->bytes[a], v->bytes[b], v->lens[a]);
}

/* Builds the trie of the given tokens: sorted by bytes, no two with the same bytes. */
static void build_trie(const grammar_vocab_t *v, const uint32_t *ids, uint32_t n, trie_t *t)
{
    uint32_t cap = 1024;
    *t = (trie_t){0};
    t->byte = xmalloc(cap);
    t->depth = xmalloc(cap);
    t->skip = xmalloc(cap * sizeof *t->skip);
    t->tok = xmalloc(cap * sizeof *t->tok);
    uint32_t path[GRAMMAR_MAX_TOKEN + 1]; /* node index at each depth */
    path[0] = 0;
    t->byte[0] = 0;
    t->depth[0] = 0;
    t->tok[0] = G_NONE;
    t->n = 1;
    uint32_t depth = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t id = ids[k], len = v->lens[id], common = 0;
        if (k) {
            uint32_t prev = ids[k - 1], pl = v->lens[prev];
            while (common < len && common < pl && v->bytes[id][common] == v->bytes[prev][common]) common++;
        }
        while (depth > common) t->skip[path[depth--]] = t->n;
        for (uint32_t d = common; d < len; d++) {
            if (t->n == cap) {
                cap *= 2;
                t->byte = xrealloc(t->byte, cap);
                t->depth = xrealloc(t->depth, cap);
                t->skip = xrealloc(t->skip, cap * sizeof *t->skip);
                t->tok = xrealloc(t->tok, cap * sizeof *t->tok);
            }
            uint32_t i = t->n++;
            t->byte[i] = v->bytes[id][d];
            t->depth[i] = (uint8_t)(d + 1);
            t->tok[i] = G_NONE;
            path[++depth] = i;
        }
        t->tok[path[depth]] = id;
    }
    while (depth > 0) t->skip[path[depth--]] = t->n;
    t->skip[0] = t->n;
}

/* plain_le[k]: plain tokens of at most k characters; plain_max[node]: the longest plain
 * token under a node when nothing else is there (a walk may then skip the subtree). */
static void plain_by_length(grammar_vocab_t *v, const uint8_t *chars)
{
    uint32_t cap = v->plain_chars, words = (uint32_t)v->words;
    v->plain_le = xcalloc((size_t)(cap + 1) * words + 1, sizeof *v->plain_le);
    for (uint32_t i = 0; i < v->n; i++)
        if (chars[i] != 255) v->plain_le[(size_t)chars[i] * words + i / 32] |= 1u << (i % 32);
    for (uint32_t k = 1; k <= cap; k++)
        for (uint32_t w = 0; w < words; w++) v->plain_le[(size_t)k * words + w] |= v->plain_le[(size_t)(k - 1) * words + w];
    const trie_t *t = &v->all;
    v->plain_max = xmalloc(t->n);
    for (uint32_t i = t->n; i-- > 0;) {
        uint8_t m = 0;
        for (uint32_t id = t->tok[i]; id != G_NONE; id = v->tok_next[id])
            if (chars[id] > m) m = chars[id];
        for (uint32_t j = i + 1; j < t->skip[i]; j = t->skip[j])
            if (v->plain_max[j] > m) m = v->plain_max[j];
        v->plain_max[i] = m;
    }
}

static void trie_free(trie_t *t)
{
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok);
}

grammar_vocab_t *grammar_vocab_new(uint32_t n, const uint8_t *const *bytes, const uint32_t *lens, const bool *excluded,
                                   const uint32_t *eos, uint32_t n_eos, int64_t think_end)
{
    grammar_vocab_t *v = xcalloc(1, sizeof *v);
    v->n = n;
    v->words = (n + 31) / 32;
    v->bytes = xmalloc((n ? n : 1) * sizeof *v->bytes);
    v->lens = xmalloc((n ? n : 1) * sizeof *v->lens);
    v->excluded = xcalloc(n ? n : 1, sizeof *v->excluded);
    v->tok_next = xmalloc((n ? n : 1) * sizeof *v->tok_next);
    v->allowed = xcalloc(v->words ? v->words : 1, sizeof *v->allowed);
    v->n_eos = n_eos;
    v->eos = xmalloc((n_eos ? n_eos : 1) * sizeof *v->eos);
    if (n_eos) memcpy(v->eos, eos, n_eos * sizeof *eos);
    v->think_end = think_end;
    uint64_t h = hash64(HASH64_INIT, &n, sizeof n);
    uint32_t *trie_ids = xmalloc((n ? n : 1) * sizeof *trie_ids), *rest_ids = xmalloc((n ? n : 1) * sizeof *rest_ids);
    uint8_t *chars = xmalloc(n ? n : 1); /* characters of each plain token, 255 for the rest */
    uint32_t n_trie = 0, n_rest = 0;
    for (uint32_t i = 0; i < n; i++) {
        v->lens[i] = lens[i];
        v->bytes[i] = xmalloc(lens[i] ? lens[i] : 1);
        memcpy(v->bytes[i], bytes[i], lens[i]);
        v->tok_next[i] = G_NONE;
        bool ex = (excluded && excluded[i]) || lens[i] == 0 || lens[i] > GRAMMAR_MAX_TOKEN;
        for (uint32_t k = 0; k < n_eos; k++) ex |= eos[k] == i;
        if (think_end == (int64_t)i) ex = true;
        v->excluded[i] = ex;
        chars[i] = 255;
        h = hash64(h, &lens[i], sizeof lens[i]);
        h = hash64(h, bytes[i], lens[i]);
        h = hash64(h, &ex, 1);
        if (ex) continue;
        v->allowed[i / 32] |= 1u << (i % 32);
        trie_ids[n_trie++] = i;
        uint32_t nc;
        if (token_is_plain(bytes[i], lens[i], &nc) && nc < 255) {
            chars[i] = (uint8_t)nc;
            if (nc > v->plain_chars) v->plain_chars = nc;
        }
    }
    h = hash64(h, eos, n_eos * sizeof *eos);
    v->fingerprint = hash64(h, &think_end, sizeof think_end);
    /* Tokens with the same bytes share a trie node: chain them from the first. */
    qsort_r(trie_ids, n_trie, sizeof *trie_ids, cmp_tokens, v);
    uint32_t m = 0;
    for (uint32_t k = 0; k < n_trie; k++) {
        uint32_t id = trie_ids[k];
        if (m && same_bytes(v, trie_ids[m - 1], id)) {
            uint32_t head = trie_ids[m - 1];
            v->tok_next[id] = v->tok_next[head];
            v->tok_next[head] = id;
            continue;
        }
        trie_ids[m++] = id;
        if (chars[id] == 255) rest_ids[n_rest++] = id;
    }
    build_trie(v, trie_ids, m, &v->all);
    build_trie(v, rest_ids, n_rest, &v->rest);
    plain_by_length(v, chars);
    free(trie_ids);
    free(rest_ids);
    free(chars);
    return v;
}

grammar_vocab_t *grammar_vocab_from_tokenizer(const tokenizer_t *tok)
{
    uint32_t n = tokenizer_vocab_size(tok);
    const uint8_t **bytes = xmalloc((n ? n : 1) * sizeof *bytes);
    uint32_t *lens = xmalloc((n ? n : 1) * sizeof *lens);
    bool *excluded = xmalloc(n ? n : 1);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = 0;
        bytes[i] = tokenizer_token_bytes(tok, i, &len);
        if (!bytes[i]) bytes[i] = (const uint8_t *)"", len = 0;
        lens[i] = (uint32_t)len;
        /* added tokens (special or not) are markup, not text */
        excluded[i] = tokenizer_is_special(tok, i) || tokenizer_added_id(tok, (const char *)bytes[i], len) == (int64_t)i;
    }
    static const char eos_text[] = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
    int64_t eos = tokenizer_added_id(tok, eos_text, strlen(eos_text));
    int64_t think_end = tokenizer_added_id(tok, "</think>", 8);
    uint32_t eos_id = (uint32_t)eos;
    grammar_vocab_t *v = grammar_vocab_new(n, bytes, lens, excluded, &eos_id, eos >= 0 ? 1 : 0, think_end);
    free(bytes);
    free(lens);
    free(excluded);
    return v;
}

void grammar_vocab_free(grammar_vocab_t *v)
{
    if (!v) return;
    for (uint32_t i = 0; i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->lens);
    free(v->excluded);
    free(v->tok_next);
    free(v->plain_le);
    free(v->plain_max);
    free(v->allowed);
    free(v->eos);
    trie_free(&v->all);
    trie_free(&v->rest);
    free(v);
}

void grammar_vocab_use_threads(grammar_vocab_t *v, struct threadpool *pool) { v->pool = pool; }
uint32_t grammar_vocab_size(const grammar_vocab_t *v) { return v->n; }
uint64_t grammar_vocab_fingerprint(const grammar_vocab_t *v) { return v->fingerprint; }
size_t grammar_mask_words(const grammar_vocab_t *v) { return v->words; }
