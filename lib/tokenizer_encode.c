/* Text to ids. tokenizer_encode: pre-tokenizer splits, then BPE of each piece.
 * tokenizer_encode_with_added: added tokens first (HF's two passes), the rest as above. */
#include "tokenizer_internal.h"
#include "utf8.h"

typedef struct {
    const tokenizer_t *t;
    tok_scratch_t *scratch;
    pcre2_match_data *match;
    pcre2_match_context *limits;
    const uint8_t *text;
    ids_t *out;
    bool failed; /* the regex engine gave up (resource limit) */
} encoder_t;

/* HF's Split(Isolated) over the pieces of the previous split: the piece text[start, end) is a
 * subject of its own (lookarounds stop at its edges); each match and each gap between
 * matches becomes a piece for the next split, and after the last split, a word for BPE. */
static void split_piece(encoder_t *e, int level, size_t start, size_t end)
{
    if (e->failed) return;
    if (level == e->t->nsplit) {
        tok_bpe_word(e->t, e->scratch, e->text + start, end - start, e->out);
        return;
    }
    const pcre2_code *re = e->t->split[level];
    const uint8_t *subject = e->text + start;
    size_t len = end - start, pos = 0;
    /* PCRE2's default backtracking budget (10M) is too small for the V4 patterns over long
     * whitespace runs (HF's Oniguruma gives up there too, and panics); they need a few steps
     * per byte, so the budget grows with the piece and stays bounded. */
    pcre2_set_match_limit(e->limits, (uint32_t)(len < (UINT32_MAX - 10000000u) / 64 ? 10000000u + 64 * len : UINT32_MAX));
    while (pos < len) {
        int rc = pcre2_match(re, subject, len, pos, PCRE2_NO_UTF_CHECK, e->match, e->limits);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            e->failed = true;
            return;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->match);
        size_t match_start = ov[0], match_end = ov[1];
        if (match_start > pos) split_piece(e, level + 1, start + pos, start + match_start);
        split_piece(e, level + 1, start + match_start, start + match_end);
        pos = match_end; /* > match_start: the patterns cannot match empty (checked at load) */
    }
    if (pos < len) split_piece(e, level + 1, start + pos, end);
}

static bool encoder_start(encoder_t *e, const tokenizer_t *t, const char *text, size_t len, ids_t *out)
{
    /* Word offsets are 32-bit in the BPE work arrays. */
    if (len >= UINT32_MAX || !utf8_valid(text, len)) return false;
    e->t = t;
    e->scratch = tok_scratch_get(t);
    e->match = e->scratch->match;
    e->limits = e->scratch->match_context;
    e->text = (const uint8_t *)text;
    e->out = out;
    e->failed = false;
    return true;
}

static int encoder_finish(encoder_t *e, size_t ids_before)
{
    if (!e->failed) return 0;
    e->out->n = ids_before;
    return -1;
}

int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, ids_t *out)
{
    encoder_t e;
    if (!encoder_start(&e, t, text, len, out)) return -1;
    size_t before = out->n;
    if (len) split_piece(&e, 0, 0, len);
    return encoder_finish(&e, before);
}

/* text[start, end) with the normalized added tokens split out (the normalizer is the
 * identity, so the normalized text is the text). */
static void encode_normalized(encoder_t *e, size_t start, size_t end)
{
    const added_trie_t *trie = &e->t->normalized_added;
    size_t at, to;
    uint32_t id;
    while (start < end && added_trie_find(trie, e->text, start, end, &at, &to, &id)) {
        if (at > start) split_piece(e, 0, start, at);
        ids_push(e->out, id);
        start = to;
    }
    if (start < end) split_piece(e, 0, start, end);
}

int tokenizer_encode_with_added(const tokenizer_t *t, const char *text, size_t len, ids_t *out)
{
    encoder_t e;
    if (!encoder_start(&e, t, text, len, out)) return -1;
    size_t before = out->n, start = 0, at, to;
    uint32_t id;
    while (start < len && added_trie_find(&t->raw_added, e.text, start, len, &at, &to, &id)) {
        if (at > start) encode_normalized(&e, start, at);
        ids_push(out, id);
        start = to;
    }
    if (start < len) encode_normalized(&e, start, len);
    return encoder_finish(&e, before);
}
