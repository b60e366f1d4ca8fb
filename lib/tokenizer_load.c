/* Reading tokenizer.json. Everything in the file that changes which ids a text gets is either
 * implemented exactly as HF tokenizers does it or refused here with a message that names it,
 * so a file we do not understand never tokenizes silently wrong. */
#include "tokenizer_internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    tokenizer_t *t;
    /* Per id, up to t->vocab_size: the spelling (pointing into the JSON tree), whether it is special. */
    const char **text;
    size_t *text_len;
    bool *special;
    char *err;
    size_t errlen;
} loader_t;

static bool fail(loader_t *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(loader_t *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err, ld->errlen, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- small JSON checks --------------------------------------------------------------- */

static bool is_null(const json_t *j)
{
    return !j || json_is_null(j);
}

/* A boolean option that must be absent or have the one value we implement. */
static bool option_is(const json_t *obj, const char *key, bool want)
{
    const json_t *v = json_object_get(obj, key);
    return is_null(v) || (json_is_boolean(v) && json_boolean_value(v) == want);
}

static const char *type_of(const json_t *obj)
{
    const char *type = json_string_value(json_object_get(obj, "type"));
    return type ? type : "(no type)";
}

static bool is_type(const json_t *obj, const char *type)
{
    return json_is_object(obj) && !strcmp(type_of(obj), type);
}

/* ---- normalizer, pre-tokenizer, decoder ---------------------------------------------- */

/* Only the identity: none, or Sequences of nothing. */
static bool check_normalizer(loader_t *ld, const json_t *n)
{
    if (is_null(n)) return true;
    if (!is_type(n, "Sequence")) return fail(ld, "normalizer %s is not supported", type_of(n));
    const json_t *list = json_object_get(n, "normalizers");
    if (!json_is_array(list)) return fail(ld, "normalizer Sequence without a normalizers list");
    for (size_t i = 0; i < json_array_size(list); i++)
        if (!check_normalizer(ld, json_array_get(list, i))) return false;
    return true;
}

static bool add_split(loader_t *ld, const json_t *p)
{
    tokenizer_t *t = ld->t;
    const char *behavior = json_string_value(json_object_get(p, "behavior"));
    if (!behavior || strcmp(behavior, "Isolated"))
        return fail(ld, "pre-tokenizer Split with behavior %s is not supported (only Isolated)", behavior ? behavior : "(none)");
    if (!option_is(p, "invert", false)) return fail(ld, "pre-tokenizer Split with invert is not supported");
    if (t->nsplit == TOK_MAX_SPLITS) return fail(ld, "more than %d Split pre-tokenizers", TOK_MAX_SPLITS);
    const json_t *pattern = json_object_get(p, "pattern");
    const json_t *regex = json_object_get(pattern, "Regex"), *literal = json_object_get(pattern, "String");
    char why[512];
    pcre2_code *re = NULL;
    if (json_is_string(regex))
        re = tok_regex_compile(json_string_value(regex), json_string_length(regex), why, sizeof why);
    else if (json_is_string(literal))
        re = tok_literal_compile(json_string_value(literal), json_string_length(literal), why, sizeof why);
    else
        return fail(ld, "pre-tokenizer Split without a Regex or String pattern");
    if (!re) return fail(ld, "pre-tokenizer Split: %s", why);
    t->split[t->nsplit++] = re;
    return true;
}

/* Splits, then one ByteLevel that only maps bytes (its own GPT-2 regex off). */
static bool load_pre_tokenizer(loader_t *ld, const json_t *p)
{
    const json_t *list = json_object_get(p, "pretokenizers");
    if (!is_type(p, "Sequence") || !json_is_array(list))
        return fail(ld, "pre-tokenizer %s is not supported (expected a Sequence of Splits and ByteLevel)", type_of(p));
    size_t n = json_array_size(list);
    for (size_t i = 0; i < n; i++) {
        const json_t *item = json_array_get(list, i);
        if (is_type(item, "Split")) {
            if (!add_split(ld, item)) return false;
        } else if (is_type(item, "ByteLevel")) {
            if (i != n - 1) return fail(ld, "pre-tokenizer ByteLevel must come last in the Sequence");
            if (!option_is(item, "add_prefix_space", false)) return fail(ld, "pre-tokenizer ByteLevel with add_prefix_space is not supported");
            if (!option_is(item, "use_regex", false)) return fail(ld, "pre-tokenizer ByteLevel with use_regex is not supported");
        } else {
            return fail(ld, "pre-tokenizer %s is not supported", type_of(item));
        }
    }
    if (!n || !is_type(json_array_get(list, n - 1), "ByteLevel"))
        return fail(ld, "pre-tokenizer Sequence must end with ByteLevel (only byte-level BPE is supported)");
    return true;
}

/* ---- model --------------------------------------------------------------------------- */

static bool check_bpe_options(loader_t *ld, const json_t *m)
{
    if (!is_type(m, "BPE")) return fail(ld, "model %s is not supported (only BPE)", type_of(m));
    const json_t *dropout = json_object_get(m, "dropout");
    if (!is_null(dropout)) return fail(ld, "BPE dropout is not supported");
    if (!is_null(json_object_get(m, "unk_token"))) return fail(ld, "BPE unk_token is not supported");
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < DI_ARRAY_LEN(affixes); i++) {
        const json_t *v = json_object_get(m, affixes[i]);
        if (!is_null(v) && !(json_is_string(v) && !json_string_length(v)))
            return fail(ld, "BPE %s is not supported", affixes[i]);
    }
    if (!option_is(m, "byte_fallback", false)) return fail(ld, "BPE byte_fallback is not supported");
    if (!option_is(m, "ignore_merges", false)) return fail(ld, "BPE ignore_merges is not supported");
    return true;
}

/* Ids are checked to be in 0..vocab_size-1 by find_vocab_size. */
static bool set_token(loader_t *ld, uint32_t id, const char *text, size_t len)
{
    if (ld->text[id] && (ld->text_len[id] != len || memcmp(ld->text[id], text, len)))
        return fail(ld, "id %u is given to both \"%.60s\" and \"%.60s\"", id, ld->text[id], text);
    ld->text[id] = text;
    ld->text_len[id] = len;
    return true;
}

static bool id_in_range(loader_t *ld, const json_t *id, const char *what, const char *text)
{
    if (json_is_integer(id) && json_integer_value(id) >= 0 && json_integer_value(id) < TOK_MAX_IDS) {
        uint32_t next = (uint32_t)json_integer_value(id) + 1;
        if (next > ld->t->vocab_size) ld->t->vocab_size = next;
        return true;
    }
    return fail(ld, "%s \"%.60s\" has no id in 0..%u", what, text, TOK_MAX_IDS - 1);
}

/* 1 + the largest id of the vocabulary and the added tokens, checking each is in range. */
static bool find_vocab_size(loader_t *ld, const json_t *vocab, const json_t *added)
{
    if (!json_is_object(vocab)) return fail(ld, "model.vocab is not an object");
    if (!is_null(added) && !json_is_array(added)) return fail(ld, "added_tokens is not an array");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)vocab, key, value)
        if (!id_in_range(ld, value, "vocabulary token", key)) return false;
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        const char *text = json_string_value(json_object_get(a, "content"));
        if (!id_in_range(ld, json_object_get(a, "id"), "added token", text ? text : "?")) return false;
    }
    return true;
}

static bool load_vocab(loader_t *ld, const json_t *vocab)
{
    const char *key;
    size_t key_len;
    json_t *value;
    void *tmp;
    json_object_keylen_foreach_safe((json_t *)vocab, tmp, key, key_len, value)
        if (!set_token(ld, (uint32_t)json_integer_value(value), key, key_len)) return false;
    for (int b = 0; b < 256; b++) {
        char utf8[3];
        uint32_t cp = byte_level_char((uint8_t)b);
        size_t n = cp < 0x80 ? 1 : 2;
        if (n == 1) utf8[0] = (char)cp;
        else utf8[0] = (char)(0xC0 | cp >> 6), utf8[1] = (char)(0x80 | (cp & 0x3F));
        const json_t *id = json_object_getn(vocab, utf8, n);
        if (!json_is_integer(id)) return fail(ld, "model.vocab lacks the byte-level symbol for byte 0x%02x", b);
        ld->t->byte_id[b] = (uint32_t)json_integer_value(id);
    }
    return true;
}

/* One merge, "left right" (the older form) or ["left", "right"]. */
static bool merge_parts(const json_t *m, const char **left, size_t *left_len, const char **right, size_t *right_len)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *space = strchr(s, ' ');
        if (!space || strchr(space + 1, ' ')) return false;
        *left = s, *left_len = (size_t)(space - s);
        *right = space + 1, *right_len = strlen(space + 1);
        return true;
    }
    if (!json_is_array(m) || json_array_size(m) != 2) return false;
    const json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
    if (!json_is_string(l) || !json_is_string(r)) return false;
    *left = json_string_value(l), *left_len = json_string_length(l);
    *right = json_string_value(r), *right_len = json_string_length(r);
    return true;
}

static bool vocab_id(const json_t *vocab, const char *s, size_t len, uint32_t *id)
{
    const json_t *v = json_object_getn(vocab, s, len);
    if (!json_is_integer(v)) return false;
    *id = (uint32_t)json_integer_value(v);
    return true;
}

static bool load_merges(loader_t *ld, const json_t *vocab, const json_t *merges)
{
    if (!json_is_array(merges)) return fail(ld, "model.merges is not an array");
    size_t n = json_array_size(merges);
    if (n > TOK_MAX_IDS) return fail(ld, "model.merges has over %u entries", TOK_MAX_IDS);
    merge_table_init(&ld->t->merges, n);
    buf_t joined = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        const char *l, *r;
        size_t ll, rl;
        uint32_t left, right, merged;
        if (!merge_parts(json_array_get(merges, i), &l, &ll, &r, &rl)) {
            ok = fail(ld, "model.merges[%zu] is not a pair of tokens", i);
            break;
        }
        buf_clear(&joined);
        buf_append(&joined, l, ll);
        buf_append(&joined, r, rl);
        if (!vocab_id(vocab, l, ll, &left) || !vocab_id(vocab, r, rl, &right) ||
            !vocab_id(vocab, (const char *)joined.data, joined.len, &merged))
            ok = fail(ld, "model.merges[%zu] (\"%.*s\" + \"%.*s\") uses a token not in the vocabulary", i, (int)ll, l, (int)rl, r);
        else if (!merge_table_put(&ld->t->merges, left, right, (uint32_t)i, merged))
            ok = fail(ld, "model.merges[%zu] (\"%.*s\" + \"%.*s\") is listed twice", i, (int)ll, l, (int)rl, r);
    }
    buf_free(&joined);
    return ok;
}

/* ---- added tokens -------------------------------------------------------------------- */

static bool load_added_tokens(loader_t *ld, const json_t *list)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *a = json_array_get(list, i), *content = json_object_get(a, "content");
        if (!json_is_string(content)) return fail(ld, "added_tokens[%zu] has no content", i);
        uint32_t id = (uint32_t)json_integer_value(json_object_get(a, "id"));
        const char *text = json_string_value(content);
        size_t len = json_string_length(content);
        if (!len || len > TOK_MAX_ADDED_LEN) return fail(ld, "added_tokens[%zu] is empty or over %d bytes", i, TOK_MAX_ADDED_LEN);
        const char *flags[] = {"lstrip", "rstrip", "single_word"};
        for (size_t f = 0; f < DI_ARRAY_LEN(flags); f++)
            if (!option_is(a, flags[f], false)) return fail(ld, "added token \"%.60s\": %s is not supported", text, flags[f]);
        if (tokenizer_added_id(ld->t, text, len) >= 0) return fail(ld, "added token \"%.60s\" is listed twice", text);
        if (!set_token(ld, id, text, len)) return false;
        bool special = json_is_true(json_object_get(a, "special"));
        ld->special[id] = special;
        /* HF's AddedToken default: normalized unless special. */
        const json_t *normalized = json_object_get(a, "normalized");
        bool norm = json_is_boolean(normalized) ? json_is_true(normalized) : !special;
        added_trie_insert(norm ? &ld->t->normalized_added : &ld->t->raw_added, (const uint8_t *)text, len, (int32_t)id);
    }
    return true;
}

/* ---- the decoded-token table --------------------------------------------------------- */

static void build_token_table(loader_t *ld)
{
    tokenizer_t *t = ld->t;
    size_t n = t->vocab_size;
    t->off = xmalloc((n + 1) * sizeof *t->off);
    t->has_token = xcalloc(n ? n : 1, sizeof *t->has_token);
    buf_t pool = {0};
    for (size_t id = 0; id < n; id++) {
        t->off[id] = (uint32_t)pool.len;
        if (!ld->text[id]) continue;
        t->has_token[id] = true;
        byte_level_decode_token(ld->text[id], ld->text_len[id], &pool);
    }
    t->off[n] = (uint32_t)pool.len;
    t->pool = pool.data;
}

/* ---- the whole file ------------------------------------------------------------------ */

static bool load_root(loader_t *ld, const json_t *root)
{
    if (!json_is_object(root)) return fail(ld, "the top level is not an object");
    if (!is_null(json_object_get(root, "truncation"))) return fail(ld, "truncation is not supported");
    if (!is_null(json_object_get(root, "padding"))) return fail(ld, "padding is not supported");
    if (!check_normalizer(ld, json_object_get(root, "normalizer"))) return false;
    if (!load_pre_tokenizer(ld, json_object_get(root, "pre_tokenizer"))) return false;
    /* The post-processor only adds special tokens when asked to (add_special_tokens=True),
     * which this tokenizer never does, so any kind leaves the ids alone. */
    const json_t *decoder = json_object_get(root, "decoder");
    if (!is_type(decoder, "ByteLevel")) return fail(ld, "decoder %s is not supported (only ByteLevel)", type_of(decoder));
    const json_t *model = json_object_get(root, "model");
    if (!check_bpe_options(ld, model)) return false;
    const json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    if (!find_vocab_size(ld, vocab, added)) return false;
    size_t n = ld->t->vocab_size ? ld->t->vocab_size : 1;
    ld->text = xcalloc(n, sizeof *ld->text);
    ld->text_len = xcalloc(n, sizeof *ld->text_len);
    ld->t->special = ld->special = xcalloc(n, sizeof *ld->special);
    if (!load_vocab(ld, vocab) || !load_merges(ld, vocab, json_object_get(model, "merges")) ||
        !load_added_tokens(ld, added))
        return false;
    build_token_table(ld);
    return true;
}

static tokenizer_t *tokenizer_new(void)
{
    tokenizer_t *t = xcalloc(1, sizeof *t);
    added_trie_init(&t->raw_added);
    added_trie_init(&t->normalized_added);
    tok_scratch_init(t);
    return t;
}

static json_t *parse_file(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > TOK_MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s: not a regular file of at most %u MiB", path, TOK_MAX_FILE_BYTES >> 20);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) snprintf(err, errlen, "%s: invalid JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    return root;
}

tokenizer_t *tokenizer_load(const char *path, char *err, size_t errlen)
{
    json_t *root = parse_file(path, err, errlen);
    if (!root) return NULL;
    char why[768];
    tokenizer_t *t = tokenizer_new();
    loader_t ld = {.t = t, .err = why, .errlen = sizeof why};
    bool ok = load_root(&ld, root);
    free(ld.text);
    free(ld.text_len);
    json_decref(root);
    if (!ok) {
        snprintf(err, errlen, "%s: %s", path, why);
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

void tokenizer_free(tokenizer_t *t)
{
    if (!t) return;
    tok_scratch_free_all(t);
    for (int i = 0; i < t->nsplit; i++) pcre2_code_free(t->split[i]);
    merge_table_free(&t->merges);
    added_trie_free(&t->raw_added);
    added_trie_free(&t->normalized_added);
    free(t->pool);
    free(t->off);
    free(t->has_token);
    free(t->special);
    free(t);
}

const char *tokenizer_default_path(void)
{
    static char path[PATH_MAX + 64];
    const char *env = getenv("DI_TOKENIZER");
    struct stat st;
    if (env && *env) {
        bool dir = !stat(env, &st) && S_ISDIR(st.st_mode);
        snprintf(path, sizeof path, dir ? "%s/tokenizer.json" : "%s", env);
        return path;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/../data/tokenizer/tokenizer.json", exe);
        if (!stat(path, &st)) return path;
    }
    return "data/tokenizer/tokenizer.json";
}

tokenizer_t *tokenizer_load_or_die(const char *path)
{
    char err[512];
    if (!path) path = tokenizer_default_path();
    tokenizer_t *t = tokenizer_load(path, err, sizeof err);
    if (!t) die("cannot load the tokenizer %s: %s", path, err);
    return t;
}
