/* The tokenizer's parts, shared by the tokenizer_*.c files only (not a public header).
 *
 * Encoding follows HF tokenizers on the file tokenizer_load accepts:
 *   added tokens split out (encode_with_added only) -> pre-tokenizer splits (PCRE2)
 *   -> bytes of each piece as byte-level symbols -> BPE merges by rank -> ids. */
#ifndef DI_TOKENIZER_INTERNAL_H
#define DI_TOKENIZER_INTERNAL_H

#include "tokenizer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Bounds on what tokenizer.json may declare, so a hostile file cannot make us allocate
 * without limit. The V4 file is far inside them. */
#define TOK_MAX_FILE_BYTES (512u << 20)
#define TOK_MAX_IDS (1u << 24)
#define TOK_MAX_SPLITS 16
#define TOK_MAX_ADDED_LEN 4096

/* Pair (left id, right id) -> merge rank and merged id; open addressing, power-of-two size. */
typedef struct {
    uint64_t key; /* (left << 32 | right) + 1; 0 marks an empty slot */
    uint32_t rank;
    uint32_t id;
} merge_entry_t;

typedef struct {
    merge_entry_t *slots;
    size_t mask;
} merge_table_t;

/* Byte trie over the spellings of a set of added tokens, for leftmost-longest matching. */
typedef struct {
    uint32_t *first_child; /* per node; 0 = none (node 0 is the root, never a child) */
    uint32_t *next_sibling;
    uint8_t *byte;
    int32_t *token_id; /* -1 when no token ends at this node */
    uint32_t nodes, cap;
    uint8_t first_bytes[32]; /* bitmap of bytes that can start a token */
} added_trie_t;

struct tokenizer {
    uint32_t vocab_size; /* 1 + the largest id, model or added */

    /* Decoding: bytes of each id, in one pool; off[id + 1] - off[id] is the length, and an
     * id without a token has_token[id] == false. */
    uint8_t *pool;
    uint32_t *off;
    bool *has_token;
    bool *special;

    /* Model */
    uint32_t byte_id[256]; /* id of the byte-level symbol of each byte */
    merge_table_t merges;

    /* Pre-tokenizer: Split(Isolated) regexes applied in order, each over the previous pieces. */
    pcre2_code *split[TOK_MAX_SPLITS];
    int nsplit;

    /* Added tokens; HF matches the non-normalized ones on the raw text first, then the
     * normalized ones on the (normalized) text between them. */
    added_trie_t raw_added, normalized_added;

    /* Per-thread scratch (match data, BPE work arrays, word cache): encode takes a const
     * tokenizer and may be called from several threads at once. */
    pthread_key_t scratch_key;
    pthread_mutex_t scratch_lock;
    struct tok_scratch *scratches; /* every thread's, so tokenizer_free can free them */
};

/* A word-cache entry: the word and its ids, in the scratch's arenas. */
typedef struct {
    uint64_t hash; /* 0 = empty */
    uint32_t word_off, ids_off;
    uint16_t word_len, nids;
} cache_slot_t;

/* Per-thread state of encoding (tokenizer_scratch.c). */
typedef struct tok_scratch {
    struct tok_scratch *next, *prev;
    const tokenizer_t *owner;
    pcre2_match_data *match;
    pcre2_match_context *match_context;

    /* BPE work arrays, grown to the longest word seen. */
    size_t cap;
    uint32_t *sym;       /* id of the symbol that starts at this byte */
    uint32_t *next_sym;  /* start of the following symbol, or len */
    uint32_t *prev_sym;  /* start of the preceding symbol, or UINT32_MAX */
    uint32_t *pair_rank; /* rank of the pair (this symbol, next), UINT32_MAX if none */
    uint32_t *pair_id;   /* what that pair merges into */
    uint64_t *heap;      /* candidate merges, rank << 32 | start, smallest first */

    /* Word cache: direct-mapped slots, a colliding word replaces the old one. */
    cache_slot_t *slots;
    uint8_t *words; /* arenas, emptied with the slots when full */
    uint32_t *ids;
    uint32_t words_len, ids_len;
} tok_scratch_t;

/* tokenizer_regex.c: translate a pattern from HF's dialect (Oniguruma, Ruby syntax) to PCRE2
 * and compile it with UTF, UCP and JIT. NULL with a reason in err if it uses something whose
 * meaning differs between the two and is not translated. */
pcre2_code *tok_regex_compile(const char *pattern, size_t len, char *err, size_t errlen);
/* The same for a literal string (Split with a String pattern). */
pcre2_code *tok_literal_compile(const char *text, size_t len, char *err, size_t errlen);

/* tokenizer_bpe.c */
void merge_table_init(merge_table_t *m, size_t count);
/* False if the pair is already there (tokenizer.json lists it twice). */
bool merge_table_put(merge_table_t *m, uint32_t left, uint32_t right, uint32_t rank, uint32_t id);
void merge_table_free(merge_table_t *m);

/* BPE of one pre-tokenized piece (raw bytes); appends its ids. */
void tok_bpe_word(const tokenizer_t *t, tok_scratch_t *s, const uint8_t *word, size_t len, ids_t *out);

/* tokenizer_scratch.c */
void tok_scratch_init(tokenizer_t *t);
/* The calling thread's scratch for t, made on first use. */
tok_scratch_t *tok_scratch_get(const tokenizer_t *t);
void tok_scratch_free_all(tokenizer_t *t);
/* Work arrays for a word of len bytes; tok_scratch_trim gives them back if they grew large. */
void tok_scratch_reserve(tok_scratch_t *s, size_t len);
void tok_scratch_trim(tok_scratch_t *s);
/* The word cache: the ids of a word seen before (NULL if not cached, *n set otherwise). */
uint64_t tok_word_hash(const uint8_t *word, size_t len);
const uint32_t *tok_cache_find(const tok_scratch_t *s, uint64_t hash, const uint8_t *word, size_t len, size_t *n);
void tok_cache_put(tok_scratch_t *s, uint64_t hash, const uint8_t *word, size_t len, const uint32_t *ids, size_t n);

/* tokenizer_added.c */
void added_trie_init(added_trie_t *tr);
void added_trie_insert(added_trie_t *tr, const uint8_t *text, size_t len, int32_t id);
/* Leftmost-longest match in text[from, len): true with *start, *end, *id set. */
bool added_trie_find(const added_trie_t *tr, const uint8_t *text, size_t from, size_t len, size_t *start,
                     size_t *end, uint32_t *id);
/* The id of the token spelled exactly text, or -1. */
int64_t added_trie_lookup(const added_trie_t *tr, const uint8_t *text, size_t len);
void added_trie_free(added_trie_t *tr);

/* tokenizer_decode.c: the byte-level alphabet (GPT-2's bytes_to_unicode). */
uint32_t byte_level_char(uint8_t b);
/* The bytes a token of the vocabulary stands for: its characters mapped back to bytes, or,
 * as HF's ByteLevel decoder does, its UTF-8 unchanged if one is not a byte-level character. */
void byte_level_decode_token(const char *text, size_t len, buf_t *out);

#endif
