/* Added tokens inside text: a byte trie of their spellings and the leftmost-longest search
 * HF does with its Aho-Corasick automaton (MatchKind::LeftmostLongest). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

static uint32_t trie_new_node(added_trie_t *tr, uint8_t byte)
{
    if (tr->nodes == tr->cap) {
        tr->cap = tr->cap ? 2 * tr->cap : 256;
        tr->first_child = xrealloc(tr->first_child, tr->cap * sizeof *tr->first_child);
        tr->next_sibling = xrealloc(tr->next_sibling, tr->cap * sizeof *tr->next_sibling);
        tr->byte = xrealloc(tr->byte, tr->cap * sizeof *tr->byte);
        tr->token_id = xrealloc(tr->token_id, tr->cap * sizeof *tr->token_id);
    }
    uint32_t n = tr->nodes++;
    tr->first_child[n] = 0;
    tr->next_sibling[n] = 0;
    tr->byte[n] = byte;
    tr->token_id[n] = -1;
    return n;
}

void added_trie_init(added_trie_t *tr)
{
    memset(tr, 0, sizeof *tr);
    trie_new_node(tr, 0); /* the root */
}

static uint32_t trie_child(const added_trie_t *tr, uint32_t node, uint8_t byte)
{
    for (uint32_t c = tr->first_child[node]; c; c = tr->next_sibling[c])
        if (tr->byte[c] == byte) return c;
    return 0;
}

void added_trie_insert(added_trie_t *tr, const uint8_t *text, size_t len, int32_t id)
{
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t c = trie_child(tr, node, text[i]);
        if (!c) {
            c = trie_new_node(tr, text[i]);
            tr->next_sibling[c] = tr->first_child[node];
            tr->first_child[node] = c;
        }
        node = c;
    }
    tr->token_id[node] = id;
    tr->first_bytes[text[0] >> 3] |= (uint8_t)(1u << (text[0] & 7));
}

bool added_trie_find(const added_trie_t *tr, const uint8_t *text, size_t from, size_t len, size_t *start,
                     size_t *end, uint32_t *id)
{
    for (size_t i = from; i < len; i++) {
        if (!(tr->first_bytes[text[i] >> 3] & (1u << (text[i] & 7)))) continue;
        int32_t best = -1;
        size_t best_end = 0;
        uint32_t node = 0;
        for (size_t j = i; j < len && (node = trie_child(tr, node, text[j])); j++) {
            if (tr->token_id[node] >= 0) {
                best = tr->token_id[node];
                best_end = j + 1;
            }
        }
        if (best >= 0) {
            *start = i;
            *end = best_end;
            *id = (uint32_t)best;
            return true;
        }
    }
    return false;
}

int64_t added_trie_lookup(const added_trie_t *tr, const uint8_t *text, size_t len)
{
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++)
        if (!(node = trie_child(tr, node, text[i]))) return -1;
    return tr->token_id[node];
}

void added_trie_free(added_trie_t *tr)
{
    free(tr->first_child);
    free(tr->next_sibling);
    free(tr->byte);
    free(tr->token_id);
    memset(tr, 0, sizeof *tr);
}
