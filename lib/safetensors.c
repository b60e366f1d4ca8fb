/* Safetensors reader: header validation, memory mapping, sharded index. */
#include "safetensors.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *path;
    uint8_t *map; /* NULL for an in-memory image */
    size_t size;
} shard_t;

struct st_archive {
    shard_t *shards;
    int nshards;
    st_tensor_t *tensors;
    size_t n, cap;
};

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_U16] = {"U16", 2},   [ST_I16] = {"I16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_U32] = {"U32", 4},   [ST_I32] = {"I32", 4},
    [ST_F32] = {"F32", 4},   [ST_U64] = {"U64", 8},   [ST_I64] = {"I64", 8},
    [ST_F64] = {"F64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E8M0] = {"F8_E8M0", 1},
};

const char *st_dtype_name(st_dtype_t t) { return (unsigned)t < ST_DTYPE_COUNT ? DTYPES[t].name : "?"; }
size_t st_dtype_size(st_dtype_t t) { return (unsigned)t < ST_DTYPE_COUNT ? DTYPES[t].size : 0; }

int st_dtype_parse(const char *name) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(name, DTYPES[i].name)) return i;
    return -1;
}

#define FAIL(...)                               \
    do {                                        \
        snprintf(err, errlen, __VA_ARGS__);     \
        goto fail;                              \
    } while (0)

static void push_tensor(st_archive_t *a, const st_tensor_t *t) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->tensors = xrealloc(a->tensors, a->cap * sizeof *a->tensors);
    }
    a->tensors[a->n++] = *t;
}

/* Reads a JSON integer that must lie in [0, max]. */
static bool json_u64(const json_t *v, uint64_t max, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max) return false;
    *out = (uint64_t)x;
    return true;
}

/* Parses one tensor entry of a header into t (name not set). */
static bool parse_entry(const char *label, const char *name, json_t *e, const uint8_t *data, size_t dsize,
                        st_tensor_t *t, char *err, size_t errlen) {
    if (!json_is_object(e)) FAIL("%s: tensor '%s': entry is not an object", label, name);
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"), *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd)) FAIL("%s: tensor '%s': missing or non-string \"dtype\"", label, name);
    int dt = st_dtype_parse(json_string_value(jd));
    if (dt < 0) FAIL("%s: tensor '%s': unknown dtype \"%.32s\"", label, name, json_string_value(jd));
    if (!json_is_array(js)) FAIL("%s: tensor '%s': missing or non-array \"shape\"", label, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS) FAIL("%s: tensor '%s': %zu dimensions (at most %d)", label, name, nd, ST_MAX_DIMS);
    memset(t, 0, sizeof *t);
    t->dtype = (st_dtype_t)dt;
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_u64(json_array_get(js, i), (uint64_t)INT64_MAX, &d))
            FAIL("%s: tensor '%s': shape[%zu] is not a non-negative integer", label, name, i);
        if (__builtin_mul_overflow(numel, d, &numel))
            FAIL("%s: tensor '%s': shape overflows", label, name);
        t->shape[i] = (int64_t)d;
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), &nbytes) || nbytes > dsize)
        FAIL("%s: tensor '%s': shape needs more bytes than the data region holds (%zu)", label, name, dsize);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        FAIL("%s: tensor '%s': \"data_offsets\" is not a pair", label, name);
    uint64_t b, en;
    if (!json_u64(json_array_get(jo, 0), dsize, &b) || !json_u64(json_array_get(jo, 1), dsize, &en) || b > en)
        FAIL("%s: tensor '%s': data_offsets outside the data region (%zu bytes) or reversed", label, name, dsize);
    if (en - b != nbytes)
        FAIL("%s: tensor '%s': data_offsets span %llu bytes, dtype %s and shape need %llu", label, name,
             (unsigned long long)(en - b), st_dtype_name(t->dtype), (unsigned long long)nbytes);
    t->numel = numel;
    t->data = data + b;
    t->nbytes = (size_t)nbytes;
    return true;
fail:
    return false;
}

static int by_offset(const void *x, const void *y) {
    const st_tensor_t *a = *(st_tensor_t *const *)x, *b = *(st_tensor_t *const *)y;
    if (a->data != b->data) return a->data < b->data ? -1 : 1;
    return a->nbytes < b->nbytes ? -1 : a->nbytes > b->nbytes;
}

/* Parses shard number `shard` (image img/len) and appends its tensors to a. */
static bool parse_image(st_archive_t *a, int shard, const uint8_t *img, size_t len, const char *label, char *err,
                        size_t errlen) {
    json_t *root = NULL;
    st_tensor_t **order = NULL;
    size_t first = a->n;
    if (len < 8) FAIL("%s: %zu bytes, too short for a safetensors header", label, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | img[i];
    if (hlen > len - 8) FAIL("%s: header length %llu exceeds the file (%zu bytes): truncated or corrupt", label,
                             (unsigned long long)hlen, len);
    if (hlen > ST_MAX_HEADER) FAIL("%s: header length %llu exceeds the limit of %u bytes", label,
                                   (unsigned long long)hlen, ST_MAX_HEADER);
    json_error_t je;
    root = json_loadb((const char *)img + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) FAIL("%s: header is not valid JSON: %s (byte %d)", label, je.text, je.position);
    if (!json_is_object(root)) FAIL("%s: header is not a JSON object", label);
    const uint8_t *data = img + 8 + hlen;
    size_t dsize = len - 8 - (size_t)hlen;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) FAIL("%s: \"__metadata__\" is not an object", label);
            continue;
        }
        if (!*key) FAIL("%s: a tensor has an empty name", label);
        st_tensor_t t;
        if (!parse_entry(label, key, val, data, dsize, &t, err, errlen)) goto fail;
        t.name = xstrdup(key);
        t.shard = shard;
        push_tensor(a, &t);
    }
    /* No two tensors may share bytes (zero-size tensors share nothing). */
    size_t cnt = a->n - first;
    order = xmalloc((cnt ? cnt : 1) * sizeof *order);
    for (size_t i = 0; i < cnt; i++) order[i] = &a->tensors[first + i];
    qsort(order, cnt, sizeof *order, by_offset);
    const st_tensor_t *reach = NULL; /* the tensor ending furthest so far */
    for (size_t i = 0; i < cnt; i++) {
        if (!order[i]->nbytes) continue;
        if (reach && order[i]->data < reach->data + reach->nbytes)
            FAIL("%s: tensors '%s' and '%s' overlap in the data region", label, reach->name, order[i]->name);
        reach = order[i];
    }
    free(order);
    json_decref(root);
    return true;
fail:
    free(order);
    json_decref(root);
    return false;
}

static int by_name(const void *x, const void *y) {
    return strcmp(((const st_tensor_t *)x)->name, ((const st_tensor_t *)y)->name);
}

/* Sorts by name; a name in two shards is an error. */
static bool finish(st_archive_t *a, char *err, size_t errlen) {
    if (a->n > 1) qsort(a->tensors, a->n, sizeof *a->tensors, by_name); /* tensors may be NULL when empty */
    for (size_t i = 1; i < a->n; i++)
        if (!strcmp(a->tensors[i].name, a->tensors[i - 1].name))
            FAIL("tensor '%s' appears in both %s and %s", a->tensors[i].name, a->shards[a->tensors[i - 1].shard].path,
                 a->shards[a->tensors[i].shard].path);
    return true;
fail:
    return false;
}

static int add_shard(st_archive_t *a, const char *path) {
    a->shards = xrealloc(a->shards, (size_t)(a->nshards + 1) * sizeof *a->shards);
    a->shards[a->nshards] = (shard_t){.path = xstrdup(path)};
    return a->nshards++;
}

static bool map_shard(st_archive_t *a, int s, char *err, size_t errlen) {
    shard_t *sh = &a->shards[s];
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) FAIL("%s: %s", sh->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        FAIL("%s: not a regular file", sh->path);
    }
    if (st.st_size < 8) {
        close(fd);
        FAIL("%s: %lld bytes, too short for a safetensors header", sh->path, (long long)st.st_size);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) FAIL("%s: mmap: %s", sh->path, strerror(errno));
    sh->map = m;
    sh->size = (size_t)st.st_size;
    return parse_image(a, s, sh->map, sh->size, sh->path, err, errlen);
fail:
    return false;
}

static bool plain_file_name(const char *s) {
    return *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

/* The index maps every tensor name to a shard file in the index's directory. */
static bool open_index(st_archive_t *a, const char *index_path, char *err, size_t errlen) {
    json_t *root = NULL;
    char *text = NULL, *dir = NULL;
    size_t len;
    int fd = open(index_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) FAIL("%s: %s", index_path, strerror(errno));
    bool sized = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (off_t)ST_MAX_INDEX;
    close(fd);
    if (!sized) FAIL("%s: not a regular file of at most %u bytes", index_path, ST_MAX_INDEX);
    text = read_file(index_path, &len);
    if (!text) FAIL("%s: %s", index_path, strerror(errno));
    json_error_t je;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) FAIL("%s: not valid JSON: %s (line %d)", index_path, je.text, je.line);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) FAIL("%s: missing \"weight_map\" object", index_path);
    const char *slash = strrchr(index_path, '/');
    dir = slash ? xstrndup(index_path, (size_t)(slash - index_path + 1)) : xstrdup("");
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v) || !plain_file_name(json_string_value(v)))
            FAIL("%s: tensor '%s' maps to a shard that is not a plain file name", index_path, name);
        buf_t p = {0};
        buf_printf(&p, "%s%s", dir, json_string_value(v));
        int s;
        for (s = 0; s < a->nshards && strcmp(a->shards[s].path, buf_cstr(&p)); s++) {}
        if (s == a->nshards && s == ST_MAX_SHARDS) {
            buf_free(&p);
            FAIL("%s: more than %d shard files", index_path, ST_MAX_SHARDS);
        }
        if (s == a->nshards) add_shard(a, buf_cstr(&p));
        buf_free(&p);
    }
    if (!a->nshards) FAIL("%s: \"weight_map\" lists no tensors", index_path);
    for (int s = 0; s < a->nshards; s++)
        if (!map_shard(a, s, err, errlen)) goto fail;
    if (!finish(a, err, errlen)) goto fail;
    /* Index and shards must agree exactly. */
    for (size_t i = 0; i < a->n; i++) {
        const st_tensor_t *t = &a->tensors[i];
        json_t *want = json_object_get(wm, t->name);
        const char *base = strrchr(a->shards[t->shard].path, '/');
        base = base ? base + 1 : a->shards[t->shard].path;
        if (!want) FAIL("%s: tensor '%s' is not listed in %s", a->shards[t->shard].path, t->name, index_path);
        if (strcmp(json_string_value(want), base))
            FAIL("%s: tensor '%s' is listed under %s", a->shards[t->shard].path, t->name, json_string_value(want));
    }
    json_object_foreach(wm, name, v) {
        if (!st_find(a, name)) FAIL("%s: lists tensor '%s' but %s has no such tensor", index_path, name, json_string_value(v));
    }
    free(dir);
    free(text);
    json_decref(root);
    return true;
fail:
    free(dir);
    free(text);
    json_decref(root);
    return false;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

st_archive_t *st_open(const char *path, char *err, size_t errlen) {
    st_archive_t *a = xcalloc(1, sizeof *a);
    struct stat st;
    bool ok;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        ok = false;
    } else if (S_ISDIR(st.st_mode)) {
        buf_t p = {0};
        buf_printf(&p, "%s/model.safetensors.index.json", path);
        if (access(buf_cstr(&p), F_OK) == 0) {
            ok = open_index(a, buf_cstr(&p), err, errlen);
        } else {
            buf_clear(&p);
            buf_printf(&p, "%s/model.safetensors", path);
            ok = map_shard(a, add_shard(a, buf_cstr(&p)), err, errlen) && finish(a, err, errlen);
        }
        buf_free(&p);
    } else if (ends_with(path, ".json")) {
        ok = open_index(a, path, err, errlen);
    } else {
        ok = map_shard(a, add_shard(a, path), err, errlen) && finish(a, err, errlen);
    }
    if (!ok) {
        st_close(a);
        return NULL;
    }
    return a;
}

st_archive_t *st_from_memory(const uint8_t *image, size_t len, const char *label, char *err, size_t errlen) {
    st_archive_t *a = xcalloc(1, sizeof *a);
    int s = add_shard(a, label);
    if (!parse_image(a, s, image, len, label, err, errlen) || !finish(a, err, errlen)) {
        st_close(a);
        return NULL;
    }
    return a;
}

void st_close(st_archive_t *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) free((char *)a->tensors[i].name);
    for (int s = 0; s < a->nshards; s++) {
        if (a->shards[s].map) munmap(a->shards[s].map, a->shards[s].size);
        free(a->shards[s].path);
    }
    free(a->tensors);
    free(a->shards);
    free(a);
}

size_t st_count(const st_archive_t *a) { return a->n; }
const st_tensor_t *st_tensor_at(const st_archive_t *a, size_t i) { return i < a->n ? &a->tensors[i] : NULL; }
int st_shard_count(const st_archive_t *a) { return a->nshards; }

const st_tensor_t *st_find(const st_archive_t *a, const char *name) {
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(a->tensors[mid].name, name);
        if (!c) return &a->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
