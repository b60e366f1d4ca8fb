/* Safetensors writer: header JSON with data_offsets, optional sharding with an index. */
#include "safetensors_write.h"

#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *name;
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;
    size_t nbytes;
} wtensor_t;

struct st_writer {
    wtensor_t *t;
    size_t n, cap;
};

st_writer_t *stw_new(void) { return xcalloc(1, sizeof(st_writer_t)); }

void stw_add(st_writer_t *w, const char *name, st_dtype_t dtype, int ndim, const int64_t *shape, void *data, size_t nbytes) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = xrealloc(w->t, w->cap * sizeof *w->t);
    }
    wtensor_t *t = &w->t[w->n++];
    *t = (wtensor_t){.name = xstrdup(name), .dtype = dtype, .ndim = ndim, .data = data, .nbytes = nbytes};
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
}

/* Writes tensors [a, b) as one file. */
static int write_file(const st_writer_t *w, size_t a, size_t b, const char *path, char *err, size_t errlen) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (size_t i = a; i < b; i++) {
        const wtensor_t *t = &w->t[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(h, t->name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", st_dtype_name(t->dtype), "shape", shape,
                                                  "data_offsets", (json_int_t)off, (json_int_t)(off + t->nbytes)));
        off += t->nbytes;
    }
    char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    size_t len = strlen(text), padded = (len + 8 + 7) / 8 * 8 - 8;
    /* Written beside and renamed into place: a process with the old file mapped keeps it. */
    buf_t tmp = {0};
    buf_printf(&tmp, "%s.partial", path);
    FILE *f = fopen(buf_cstr(&tmp), "wb");
    int rc = -1;
    if (!f) {
        snprintf(err, errlen, "%s: %s", buf_cstr(&tmp), strerror(errno));
        free(text);
        buf_free(&tmp);
        return -1;
    }
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(prefix, 1, 8, f) == 8 && fwrite(text, 1, len, f) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (size_t i = a; ok && i < b; i++) ok = fwrite(w->t[i].data, 1, w->t[i].nbytes, f) == w->t[i].nbytes;
    if (fclose(f) != 0) ok = false;
    if (ok && rename(buf_cstr(&tmp), path) == 0) rc = 0;
    else {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        unlink(buf_cstr(&tmp));
    }
    free(text);
    buf_free(&tmp);
    return rc;
}

int stw_write(st_writer_t *w, const char *dir, int shards, char *err, size_t errlen) {
    buf_t path = {0};
    if (shards <= 1) {
        buf_printf(&path, "%s/model.safetensors", dir);
        int rc = write_file(w, 0, w->n, buf_cstr(&path), err, errlen);
        buf_free(&path);
        return rc;
    }
    size_t total = 0;
    for (size_t i = 0; i < w->n; i++) total += w->t[i].nbytes;
    json_t *map = json_object();
    size_t start = 0, acc = 0;
    int rc = 0;
    if ((size_t)shards > w->n) shards = w->n ? (int)w->n : 1;
    for (int s = 0; s < shards && rc == 0; s++) {
        /* a tensor joins this shard while its middle lies within the shard's share of the
         * bytes, leaving at least one tensor for each later shard; the last takes the rest */
        size_t end = start, later = (size_t)(shards - s - 1);
        size_t goal = total / (size_t)shards * (size_t)(s + 1);
        while (end < w->n && w->n - end > later && (end == start || !later || acc + w->t[end].nbytes / 2 <= goal))
            acc += w->t[end++].nbytes;
        char base[64];
        snprintf(base, sizeof base, "model-%05d-of-%05d.safetensors", s + 1, shards);
        buf_clear(&path);
        buf_printf(&path, "%s/%s", dir, base);
        rc = write_file(w, start, end, buf_cstr(&path), err, errlen);
        for (size_t i = start; i < end; i++) json_object_set_new(map, w->t[i].name, json_string(base));
        start = end;
    }
    if (rc == 0) {
        json_t *index = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map);
        buf_clear(&path);
        buf_printf(&path, "%s/model.safetensors.index.json", dir);
        if (json_dump_file(index, buf_cstr(&path), JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            snprintf(err, errlen, "%s: write failed", buf_cstr(&path));
            rc = -1;
        }
        json_decref(index);
    } else {
        json_decref(map);
    }
    buf_free(&path);
    return rc;
}

void stw_free(st_writer_t *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w);
}
