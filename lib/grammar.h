/* Constrained decoding. A constraint (a regex, a JSON schema, or "any JSON object") is
 * compiled into a byte-level pushdown automaton: one deterministic automaton per grammar
 * rule, rules calling each other only where a schema recurses. For every automaton state
 * the set of vocabulary tokens that may come next is computed once at compile time; the
 * sampler asks a matcher for the allowed-token bitmask of its current state, samples, and
 * tells the matcher which token it took.
 *
 *   grammar_vocab_t *v = grammar_vocab_from_tokenizer(tok);           once per process
 *   grammar_t *g = grammar_compile(v, kind, text, true, err, sizeof err);  per distinct constraint
 *   grammar_matcher_t *m = grammar_matcher_new(g, thinking);         per request
 *   loop: grammar_matcher_fill_mask(m, mask); sample within mask; grammar_matcher_accept(m, id)
 *
 * What the compiled grammar accepts is documented in docs/GRAMMAR.md (regex dialect, the
 * JSON-schema subset, the whitespace policy, how numbers with bounds are written). Anything
 * outside it is refused at compile time with a message naming it: a constraint is never
 * silently loosened. A compiled grammar is immutable and may be shared between threads; a
 * matcher belongs to one request. */
#ifndef DI_GRAMMAR_H
#define DI_GRAMMAR_H

#include "frame.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bumped whenever compiled grammars (hence hashes) change meaning. */
#define GRAMMAR_VERSION 1

/* Bounds: a constraint beyond them is refused with a message that names the bound. */
#define GRAMMAR_MAX_TEXT      (1u << 20)  /* bytes of schema JSON */
#define GRAMMAR_MAX_PATTERN   16384       /* bytes of one regex or schema pattern */
#define GRAMMAR_MAX_REPEAT    1000        /* counted repetition {m,n}, minLength, minItems */
#define GRAMMAR_MAX_NESTING   64          /* regex groups / schema nesting */
#define GRAMMAR_MAX_NFA       400000      /* NFA states built for one rule */
#define GRAMMAR_MAX_DFA       40000       /* automaton states of a whole grammar */
#define GRAMMAR_MAX_WORK      16000000    /* NFA states and edges visited building the automata */
#define GRAMMAR_MAX_MASK_WORK 268435456u  /* vocabulary trie nodes visited making the token masks */
#define GRAMMAR_MAX_RULES     256         /* recursive schema nodes */
#define GRAMMAR_MAX_TOKEN     255         /* longer vocabulary tokens are never allowed */

/* ---- vocabulary ------------------------------------------------------------------- */

typedef struct grammar_vocab grammar_vocab_t;

/* The vocabulary as the grammar sees it: every token's bytes, in a trie. Added tokens
 * (special or not: <think>, tool-call markers, ...) never appear in constrained output;
 * EOS (<｜end▁of▁sentence｜>) is allowed only where the grammar accepts; </think> ends the
 * free reasoning of thinking mode. */
grammar_vocab_t *grammar_vocab_from_tokenizer(const tokenizer_t *tok);

/* A vocabulary from raw byte strings (tests, synthetic vocabularies). excluded[i] (may be
 * NULL) keeps token i out of constrained output; eos ids may be empty; think_end < 0: none. */
grammar_vocab_t *grammar_vocab_new(uint32_t n, const uint8_t *const *bytes, const uint32_t *lens,
                                   const bool *excluded, const uint32_t *eos, uint32_t n_eos, int64_t think_end);
void grammar_vocab_free(grammar_vocab_t *v);
/* Token masks of grammars compiled for v are computed on this pool's threads (NULL: the
 * compiling thread alone). A pool runs one loop at a time: compiles that share it must
 * not run concurrently. */
struct threadpool;
void grammar_vocab_use_threads(grammar_vocab_t *v, struct threadpool *pool);
uint32_t grammar_vocab_size(const grammar_vocab_t *v);
/* Hash of everything the masks depend on: token bytes, exclusions, EOS and </think> ids. */
uint64_t grammar_vocab_fingerprint(const grammar_vocab_t *v);
/* uint32 words in a mask: bit (id % 32) of word (id / 32) allows token id. */
size_t grammar_mask_words(const grammar_vocab_t *v);

/* ---- compiled grammars -------------------------------------------------------------- */

typedef struct grammar grammar_t;

/* Compiles a constraint (text: the regex, or the schema as JSON; ignored for json_object).
 * with_masks=false builds and checks the automaton only (what di-grammar needs to validate a
 * constraint); matchers need with_masks=true. Returns NULL with the reason in err for an
 * invalid or unsupported constraint, or one beyond the bounds above. */
grammar_t *grammar_compile(const grammar_vocab_t *v, constraint_kind_t kind, const char *text, bool with_masks,
                           char *err, size_t errlen);
/* Reference counting: compile returns one reference; matchers hold their own. */
grammar_t *grammar_ref(grammar_t *g);
void grammar_unref(grammar_t *g);

/* The constraint in canonical form: the regex as given, the schema re-serialised as compact
 * JSON with its key order kept, NULL for json_object. Compiling it gives the same grammar. */
const char *grammar_canonical(const grammar_t *g);
constraint_kind_t grammar_kind(const grammar_t *g);
/* grammar_key() of the canonical form: what frames carry (constraint.hash). */
uint64_t grammar_hash(const grammar_t *g);
/* The cache key of a constraint text: grammar version, vocabulary fingerprint, kind, text. */
uint64_t grammar_key(const grammar_vocab_t *v, constraint_kind_t kind, const char *text);

typedef struct {
    uint32_t rules;        /* rules of the pushdown automaton (1 unless the schema recurses) */
    uint32_t states;       /* automaton states, all rules */
    uint32_t classes;      /* byte equivalence classes */
    uint32_t mask_sets;    /* distinct stored token sets */
    size_t mask_bytes;     /* memory of the stored token sets */
    uint64_t compile_ns;   /* automaton */
    uint64_t masks_ns;     /* token sets */
} grammar_stats_t;
grammar_stats_t grammar_stats(const grammar_t *g);

/* Whole-output check of a byte string (tests, tools): does the grammar accept it? */
bool grammar_match_bytes(const grammar_t *g, const uint8_t *s, size_t n);

/* ---- matching ---------------------------------------------------------------------- */

typedef struct grammar_matcher grammar_matcher_t;

/* A matcher at the start of the output. thinking: the output starts inside a reasoning
 * block; everything up to and including the </think> token is free (EOS excepted: an
 * answer must follow), the constraint applies from the token after it. NULL if g was
 * compiled without masks. */
grammar_matcher_t *grammar_matcher_new(grammar_t *g, bool thinking);
void grammar_matcher_free(grammar_matcher_t *m);

/* Writes grammar_mask_words() words: the tokens allowed next. EOS ids are set exactly when
 * grammar_matcher_can_end(). After EOS was accepted nothing is allowed. */
void grammar_matcher_fill_mask(grammar_matcher_t *m, uint32_t *mask);
/* Advances by one token; false (state unchanged) if the token is not allowed. */
bool grammar_matcher_accept(grammar_matcher_t *m, uint32_t token);
/* The answer so far is a complete match (false while still reasoning). */
bool grammar_matcher_is_accepting(const grammar_matcher_t *m);
/* EOS allowed now: is_accepting and EOS not yet taken. */
bool grammar_matcher_can_end(const grammar_matcher_t *m);
/* Nothing but EOS can follow: the sampler may stop without sampling. */
bool grammar_matcher_must_end(grammar_matcher_t *m);
/* EOS was accepted: the output is finished. */
bool grammar_matcher_is_finished(const grammar_matcher_t *m);
/* Still inside the reasoning block of thinking mode. */
bool grammar_matcher_in_reasoning(const grammar_matcher_t *m);
/* Fewest bytes that complete the answer from here (0 when accepting; UINT32_MAX while
 * reasoning). A sampler near max_tokens can steer towards a complete answer with it. */
uint32_t grammar_matcher_bytes_to_end(const grammar_matcher_t *m);
/* Undoes the last n accepted tokens (speculative decoding). false if fewer were accepted. */
bool grammar_matcher_rollback(grammar_matcher_t *m, uint32_t n);
/* Tokens accepted so far. */
uint32_t grammar_matcher_position(const grammar_matcher_t *m);

/* ---- random walks ------------------------------------------------------------------ */

/* Outputs made through the masks with random choices standing in for a model (tests,
 * benchmarks): each step fills the mask and takes an allowed token by seed, EOS with
 * probability 1/3 once allowed; after steer_after answer tokens, the allowed token that
 * leaves the fewest bytes to complete (with every single byte in the vocabulary that count
 * falls each step, so the output finishes); with thinking, think_tokens free tokens and
 * then </think>. */
typedef struct {
    uint64_t seed;
    uint32_t max_tokens;   /* 0: 2000 */
    uint32_t steer_after;  /* 0: 48 */
    uint32_t think_tokens; /* 0: 12 */
    bool thinking;
} grammar_walk_opts_t;

typedef struct {
    ids_t tokens;          /* every token taken, EOS included */
    uint32_t answer_start; /* index of the first answer token (after </think>) */
    bool finished;         /* EOS taken (else max_tokens, or a dead end) */
    uint64_t *mask_ns;     /* per step, the time grammar_matcher_fill_mask took */
    uint32_t n_mask_ns;
} grammar_walk_t;

void grammar_walk(grammar_t *g, const grammar_walk_opts_t *o, grammar_walk_t *out);
void grammar_walk_free(grammar_walk_t *w);

/* ---- cache -------------------------------------------------------------------------- */

typedef struct grammar_cache grammar_cache_t;

/* Compiled grammars (and compile errors) by grammar_key, at most max_entries of them, the
 * least recently used evicted first. */
grammar_cache_t *grammar_cache_new(const grammar_vocab_t *v, uint32_t max_entries, bool with_masks);
void grammar_cache_free(grammar_cache_t *c);
/* A new reference to the compiled constraint (compiled on first use), or NULL with the
 * compile error in err (also remembered). *hit tells whether the cache had it. */
grammar_t *grammar_cache_get(grammar_cache_t *c, constraint_kind_t kind, const char *text, bool *hit, char *err,
                             size_t errlen);

#endif
