/* Internals shared by the grammar_*.c files: compile context, code point sets, the
 * expression tree both front ends (regex, JSON schema) produce, NFAs, DFAs, the vocabulary
 * trie and the compiled grammar. Not for use outside lib/grammar_*.c and their tests. */
#ifndef DI_GRAMMAR_INTERNAL_H
#define DI_GRAMMAR_INTERNAL_H

#include "grammar.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define G_NONE UINT32_MAX  /* no state / no node / no token */
#define G_INF UINT32_MAX   /* unbounded repetition */
#define G_MAX_CP 0x10FFFFu

/* ---- compile context: first error wins, everything allocated is freed together ---- */

typedef struct g_block g_block_t;

typedef struct {
    char *err;
    size_t errlen;
    bool failed;
    g_block_t *blocks;     /* arena */
    size_t dfa_states;     /* DFA states of the grammar so far */
    uint64_t subset_work;  /* NFA states and edges the subset constructions visited so far */
    struct dfa **owned;    /* automata freed with the context */
    uint32_t n_owned, cap_owned;
} gctx_t;

void gctx_init(gctx_t *c, char *err, size_t errlen);
void gctx_free(gctx_t *c);
/* Records the first error; returns false so callers can `return g_fail(...)`. */
bool g_fail(gctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *g_alloc(gctx_t *c, size_t n);   /* zeroed, lives until gctx_free */
void g_own_dfa(gctx_t *c, struct dfa *d);

/* ---- sets of Unicode code points: sorted, disjoint, non-adjacent ranges ---------------- */

typedef struct { uint32_t lo, hi; } cp_range_t;
typedef struct {
    cp_range_t *r;
    uint32_t n, cap;
} cpset_t;

void cpset_add(cpset_t *s, uint32_t lo, uint32_t hi);
void cpset_add_set(cpset_t *s, const cpset_t *t);
void cpset_negate(cpset_t *s);               /* within [0, 0x10FFFF] */
void cpset_remove(cpset_t *s, uint32_t lo, uint32_t hi);
void cpset_free(cpset_t *s);
/* Splits [lo, hi] (surrogates excluded) into UTF-8 byte-range sequences. */
typedef void (*utf8_seq_fn)(void *ctx, const uint8_t *lo, const uint8_t *hi, int n);
void utf8_sequences(uint32_t lo, uint32_t hi, utf8_seq_fn fn, void *ctx);
int utf8_encode_cp(uint32_t cp, uint8_t out[4]);

/* ---- expression trees ------------------------------------------------------------------ */

typedef enum {
    AST_EMPTY,   /* the empty string */
    AST_FAIL,    /* nothing */
    AST_BYTES,   /* a literal byte string */
    AST_CLASS,   /* one code point of a set, UTF-8 encoded */
    AST_CONCAT,
    AST_ALT,
    AST_REPEAT,  /* kids[0]{min,max}, max may be G_INF */
    AST_BEGIN,   /* ^: only at the start of the automaton's input */
    AST_END,     /* $: only at its end */
    AST_CALL,    /* nonterminal: rule number in min */
    AST_DFA,     /* an embedded call-free DFA; json_escape: its bytes are JSON string content */
    AST_LIST,    /* items joined by kids[n] (separator), item i optional unless required[i];
                    kids[n+1] (may be NULL) may follow any number of times (object bodies) */
} ast_kind_t;

typedef struct dfa dfa_t;
typedef struct ast ast_t;
struct ast {
    ast_kind_t kind;
    uint32_t n;          /* kids, bytes or ranges */
    uint32_t min, max;
    ast_t **kids;
    uint8_t *bytes;
    cp_range_t *ranges;
    bool *required;
    const dfa_t *dfa;
    bool json_escape;
};

ast_t *ast_new(gctx_t *c, ast_kind_t kind);
ast_t *ast_empty(gctx_t *c);
ast_t *ast_fail(gctx_t *c);
ast_t *ast_bytes(gctx_t *c, const void *p, size_t n);
ast_t *ast_str(gctx_t *c, const char *s);
ast_t *ast_class(gctx_t *c, const cpset_t *set);          /* copies the set */
ast_t *ast_range(gctx_t *c, uint32_t lo, uint32_t hi);    /* one code point in [lo, hi] */
ast_t *ast_concat(gctx_t *c, ast_t **kids, uint32_t n);   /* copies the array */
ast_t *ast_alt(gctx_t *c, ast_t **kids, uint32_t n);
ast_t *ast_seq2(gctx_t *c, ast_t *a, ast_t *b);
ast_t *ast_seq3(gctx_t *c, ast_t *a, ast_t *b, ast_t *d);
ast_t *ast_or2(gctx_t *c, ast_t *a, ast_t *b);
ast_t *ast_repeat(gctx_t *c, ast_t *kid, uint32_t min, uint32_t max);
ast_t *ast_opt(gctx_t *c, ast_t *kid);
ast_t *ast_call(gctx_t *c, uint32_t rule);
ast_t *ast_dfa(gctx_t *c, const dfa_t *d, bool json_escape);

/* A growable list of trees, for builders. */
typedef struct {
    ast_t **v;
    uint32_t n, cap;
} astv_t;
void astv_push(astv_t *a, ast_t *x);
void astv_free(astv_t *a);

/* ---- regex front end ------------------------------------------------------------------- */

typedef enum {
    REGEX_PCRE,    /* a regex constraint: PCRE2 semantics (UTF, no UCP), full match */
    REGEX_SCHEMA,  /* a JSON-schema pattern: sound for ECMA-262, PCRE2 and Python re alike */
} regex_dialect_t;

/* Parses a pattern into a tree (^ and $ as AST_BEGIN/AST_END). NULL on error (c->err). */
ast_t *regex_parse(gctx_t *c, const char *pattern, size_t len, regex_dialect_t dialect);

/* ---- automata -------------------------------------------------------------------------- */

/* Thompson NFA: edges on byte ranges, epsilon (plain, or only at the start / the end of the
 * input: the anchors), and calls of other rules. */
typedef enum { NE_EPS, NE_BEGIN, NE_END, NE_BYTES, NE_CALL } nfa_edge_kind_t;
typedef struct {
    uint32_t from, to, rule;
    uint8_t kind, lo, hi;
} nfa_edge_t;
typedef struct {
    uint32_t n_states, start, final;
    nfa_edge_t *e;
    uint32_t n_edges, cap;
} nfa_t;

bool nfa_build(gctx_t *c, const ast_t *a, nfa_t *out);
void nfa_free(nfa_t *n);

/* A DFA over byte classes plus calls. next[s * n_classes + class]: the next state or
 * G_NONE. Calls of state s: calls[call_off[s] .. call_off[s + 1]). */
typedef struct { uint32_t rule, to; } dfa_call_t;

struct dfa {
    uint32_t n_states, n_classes, start;
    uint8_t class_of[256];
    uint32_t *next;
    uint8_t *accept;
    uint32_t *call_off;     /* n_states + 1 entries; NULL when call-free */
    dfa_call_t *calls;
};

/* Tree -> DFA (Thompson NFA, subset construction with anchors), trimmed assuming every
 * called rule can complete, and minimised. NULL on error. */
dfa_t *dfa_from_ast(gctx_t *c, const ast_t *a);
void dfa_free(dfa_t *d);
/* Product of two call-free DFAs: accepts L(a) ∩ L(b), or L(a) \ L(b) when minus. */
dfa_t *dfa_product(gctx_t *c, const dfa_t *a, const dfa_t *b, bool minus);
/* Drops states that cannot reach acceptance, given which rules can complete
 * (productive[r], NULL: none needed). Keeps the start state even if it is dead. */
void dfa_trim(dfa_t *d, const bool *productive);
bool dfa_is_empty(const dfa_t *d);
/* Merges equivalent states (of a trimmed DFA). */
void dfa_minimize(dfa_t *d);
/* Whole-string match of a call-free DFA. */
bool dfa_match(const dfa_t *d, const uint8_t *s, size_t n);

/* ---- JSON pieces --------------------------------------------------------------------- */

/* Whitespace policy: one optional space after ',' and ':', nothing else. */
ast_t *json_sep_comma(gctx_t *c);
ast_t *json_sep_colon(gctx_t *c);
/* Any JSON string (all escapes), with a code point count in [min, max]. */
ast_t *json_string_any(gctx_t *c, uint32_t min, uint32_t max);
/* A JSON literal (string, number, true, ...) in canonical compact form. */
ast_t *json_literal(gctx_t *c, const void *json_value);
/* Any JSON value, as calls to a rule the caller allocates (value_rule). */
ast_t *json_value_body(gctx_t *c, uint32_t value_rule);
ast_t *json_object_body(gctx_t *c, uint32_t value_rule);

/* ---- numbers ------------------------------------------------------------------------- */

/* Any JSON number (full syntax, exponent included). */
ast_t *json_number_any(gctx_t *c);

/* Bounds on a number: each a JSON number (json_t *) with its comparison. */
typedef enum { CMP_GE, CMP_GT, CMP_LE, CMP_LT } cmp_t;
typedef struct {
    const void *value;
    cmp_t op;
} num_bound_t;
/* Integers, or numbers (plain decimals, see grammar_number.c), meeting every bound. */
ast_t *json_integer_ast(gctx_t *c, const num_bound_t *b, uint32_t n);
ast_t *json_number_ast(gctx_t *c, const num_bound_t *b, uint32_t n);

/* ---- JSON schema front end ----------------------------------------------------------- */

typedef struct {
    ast_t **rules;         /* rules[0] is the start */
    uint32_t n_rules, cap;
} rules_t;
uint32_t rules_add(rules_t *r);   /* reserves a rule number, body NULL */

/* Parses and compiles the schema; *canonical gets the compact re-serialisation (malloc'd). */
bool schema_compile(gctx_t *c, const char *text, rules_t *out, char **canonical);

/* ---- vocabulary ---------------------------------------------------------------------- */

/* Trie of token byte strings in depth-first preorder: node i's subtree is [i, skip[i]). */
typedef struct {
    uint32_t n;           /* nodes; node 0 is the root (empty prefix) */
    uint8_t *byte;        /* edge byte into the node */
    uint8_t *depth;
    uint32_t *skip;
    uint32_t *tok;        /* first token ending at the node, or G_NONE */
} trie_t;

struct grammar_vocab {
    uint32_t n;
    uint8_t **bytes;
    uint32_t *lens;
    bool *excluded;
    uint32_t *eos;
    uint32_t n_eos;
    int64_t think_end;
    uint32_t *tok_next;   /* more tokens with the same bytes: a chain from trie_t.tok */
    trie_t all;           /* every allowed-in-principle token */
    /* Plain tokens: no '"', '\\' or control byte, UTF-8 valid from a character boundary
     * (a cut-off last character allowed): text that fits inside any JSON string. */
    trie_t rest;          /* the tokens that are not plain */
    uint32_t plain_chars; /* most characters (begun) in one plain token */
    uint32_t *plain_le;   /* (plain_chars + 1) masks: plain tokens of at most k characters */
    uint8_t *plain_max;   /* per node of `all`: most characters of a token in its subtree if
                             all of them are plain, else 255 */
    uint32_t *allowed;    /* mask of every non-excluded token */
    uint64_t fingerprint;
    size_t words;
    struct threadpool *pool; /* for computing token sets; NULL: the calling thread */
};

/* ---- the compiled grammar -------------------------------------------------------------- */

/* How a token set is stored: the ids in it, the ids not in it (among vocab->allowed), or a
 * bitmap; whichever is smallest. */
typedef enum { SET_LIST, SET_EXCEPT, SET_BITMAP } set_form_t;
typedef struct {
    uint8_t form;
    uint32_t n;           /* ids, or words */
    uint32_t *data;
} tokset_t;

/* Per state: tokens accepted without leaving the state's rule frame, and where a token
 * needs the caller's frame: trie nodes (subtrees) to walk from the popped stack, and
 * whether a pop right away (before any byte) is possible. */
typedef struct {
    uint32_t set;         /* index into grammar.sets */
    uint32_t pop_off;     /* pops[pop_off .. pop_off + n_pops): trie node ids */
    uint32_t n_pops;
    bool pop_now;
    bool pops_in_rest;    /* pops index vocab->rest, else vocab->all */
} state_mask_t;

struct grammar {
    atomic_int refs;
    const grammar_vocab_t *vocab;
    constraint_kind_t kind;
    char *canonical;
    uint64_t hash;

    uint32_t n_rules, n_states, n_classes;
    uint8_t class_of[256];
    uint32_t *next;           /* n_states * n_classes */
    uint8_t *accept;
    uint32_t *rule_of;
    uint32_t *call_off;       /* n_states + 1 */
    dfa_call_t *calls;        /* global state ids */
    uint32_t *rule_start;
    uint8_t (*first)[32];     /* per rule: bytes that can begin it */
    uint8_t (*follow)[32];    /* per rule: bytes that can follow it */
    uint32_t *dist;           /* per state: fewest bytes to complete its rule */
    uint32_t *rule_min;       /* per rule: shortest match */

    bool has_masks;
    state_mask_t *masks;      /* per state */
    tokset_t *sets;
    uint32_t n_sets;
    uint32_t *pops;
    uint32_t n_pops_total;

    grammar_stats_t stats;
};

static inline bool bit_has(const uint8_t *set, uint8_t b) { return set[b >> 3] >> (b & 7) & 1; }
static inline void bit_set(uint8_t *set, uint8_t b) { set[b >> 3] |= (uint8_t)(1u << (b & 7)); }

/* ---- pushdown stepping (grammar_step.c) ----------------------------------------------- */

/* A configuration: the current state and the frame below it (index into a node array,
 * G_NONE at the bottom of the output, G_BASE when walking from an unknown context). */
#define G_BASE (G_NONE - 1)
typedef struct {
    uint32_t state;     /* return state */
    uint32_t parent;
    uint32_t tail;      /* bytes needed to complete this frame and all below */
    bool can_end;       /* this frame and all below are accepting */
} gnode_t;
typedef struct {
    gnode_t *v;
    uint32_t n, cap;
} gnodes_t;
typedef struct {
    uint32_t state, parent;
} gcfg_t;

typedef enum { STEP_DEAD, STEP_OK, STEP_POP_BASE } step_result_t;
/* One byte from cfg (deterministic: the compiler checked the grammar is LL(1) on bytes). */
step_result_t g_step(const grammar_t *g, gnodes_t *nodes, gcfg_t *cfg, uint8_t b);
bool g_cfg_can_end(const grammar_t *g, const gnodes_t *nodes, gcfg_t cfg);
uint32_t g_cfg_distance(const grammar_t *g, const gnodes_t *nodes, gcfg_t cfg);
/* ORs into mask the tokens of trie subtree `node` (whose prefix bytes were consumed) that
 * are valid from cfg. Used at run time once the real stack is known. */
void g_walk_subtree(const grammar_t *g, gnodes_t *nodes, gcfg_t cfg, const trie_t *t, uint32_t node, uint32_t *mask);

/* Links rule DFAs (rule 0 the start) into g's tables; false with c->err on refusal. */
bool grammar_link(gctx_t *c, grammar_t *g, dfa_t **dfas, uint32_t n);
/* The matcher's whole position (phase, state, the stack's return states) as numbers, for
 * tests that enumerate distinct positions. Returns the count (written up to cap). */
size_t grammar_matcher_key(const grammar_matcher_t *m, uint32_t *out, size_t cap);
/* Computes the per-state token sets (grammar_mask.c); false (the sets unusable) when the
 * walks pass GRAMMAR_MAX_MASK_WORK trie nodes. */
bool grammar_build_masks(grammar_t *g);
/* ORs the set into mask; fresh: writes the set, whatever mask held. */
void tokset_or(const grammar_vocab_t *v, const tokset_t *s, uint32_t *mask, bool fresh);

#endif
