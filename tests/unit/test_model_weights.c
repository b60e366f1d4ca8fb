/* Binding generated checkpoints by official names: both variants and a sharded copy load and
 * hold the same dequantized weights; a missing, extra, mis-shaped or mis-typed tensor is an
 * error naming it; DSpark and vision tensors are skipped and counted. */
#include "mkmodel.h"
#include "model_weights.h"
#include "safetensors_write.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char err[512], root[64];
static model_config_t cfg;

static const char *path_of(const char *sub) {
    static char p[160];
    snprintf(p, sizeof p, "%s/%s", root, sub);
    return p;
}

static void generate(const char *sub, bool fp8, int shards) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", path_of(sub));
    if (system(cmd)) {}
    model_config_t c = cfg;
    c.quantized = fp8;
    CHECKF(mkmodel_write(&c, 3, shards, path_of(sub), err, sizeof err) == 0, "%s", err);
}

typedef struct {
    const model_tensor_t *list;
    size_t n, cap;
} collect_t;

static bool collect(void *ctx, const model_tensor_t *t) {
    collect_t *c = ctx;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->list = xrealloc((void *)c->list, c->cap * sizeof *c->list);
    }
    ((model_tensor_t *)c->list)[c->n++] = *t;
    return true;
}

static void test_variants_agree(void) {
    generate("fp8", true, 1);
    generate("bf16", false, 1);
    generate("shard", true, 4);
    model_weights_t w8, w16, ws;
    CHECKF(model_weights_load(&w8, &cfg, path_of("fp8"), err, sizeof err) == 0, "%s", err);
    CHECKF(model_weights_load(&w16, &cfg, path_of("bf16"), err, sizeof err) == 0, "%s", err);
    CHECKF(model_weights_load(&ws, &cfg, path_of("shard"), err, sizeof err) == 0, "%s", err);
    CHECK(st_shard_count(ws.st) == 4 && ws.n_bound == w8.n_bound);
    CHECK(w8.layers[0].attn.wq_a.kind == WQ_FP8 && w8.layers[0].ffn.w1[0].kind == WQ_FP4 &&
          w8.layers[1].engram.embed.kind == WQ_FP8 && w8.embed.kind == WQ_BF16 && w8.layers[0].hc_attn_fn.kind == WQ_F32);
    CHECK(w16.layers[0].attn.wq_a.kind == WQ_BF16 && w16.layers[0].ffn.w1[0].kind == WQ_BF16);
    /* every tensor, in the three copies, dequantizes to the same floats */
    collect_t l8 = {0}, l16 = {0}, ls = {0};
    model_tensors_foreach(&cfg, &w8, collect, &l8);
    model_tensors_foreach(&cfg, &w16, collect, &l16);
    model_tensors_foreach(&cfg, &ws, collect, &ls);
    CHECK(l8.n == l16.n && l8.n == ls.n && l8.n > 300);
    size_t differ = 0, values = 0, quantized = 0;
    for (size_t i = 0; i < l8.n && l8.n == l16.n && l8.n == ls.n; i++) {
        const wmat_t *a = l8.list[i].slot, *b = l16.list[i].slot, *s = ls.list[i].slot;
        size_t n = (size_t)(a->rows * a->cols);
        float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
        wmat_rows(a, 0, a->rows, x);
        wmat_rows(b, 0, b->rows, y);
        wmat_rows(s, 0, s->rows, z);
        differ += memcmp(x, y, n * 4) != 0 || memcmp(x, z, n * 4) != 0;
        quantized += a->kind == WQ_FP8 || a->kind == WQ_FP4;
        values += n;
        free(x);
        free(y);
        free(z);
    }
    CHECKF(differ == 0, "%zu of %zu tensors differ between fp8, bf16 and sharded", differ, l8.n);
    CHECK(quantized > 100 && values > 100000);
    free((void *)l8.list);
    free((void *)l16.list);
    free((void *)ls.list);
    model_weights_free(&w8);
    model_weights_free(&w16);
    model_weights_free(&ws);
}

/* Rewrites the fp8 checkpoint into sub through edit(name, dtype, shape) -> keep?, then binds it. */
typedef bool (*edit_fn)(const char *name, st_dtype_t *dtype, int64_t *shape, size_t *nbytes);

static void rewrite(edit_fn edit, const char *extra_name, const char *want) {
    st_archive_t *src = st_open(path_of("fp8"), err, sizeof err);
    if (!src) return;
    st_writer_t *w = stw_new();
    for (size_t i = 0; i < st_count(src); i++) {
        const st_tensor_t *t = st_tensor_at(src, i);
        st_dtype_t dt = t->dtype;
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        size_t nbytes = t->nbytes;
        if (edit && !edit(t->name, &dt, shape, &nbytes)) continue;
        void *data = xcalloc(nbytes ? nbytes : 1, 1);
        memcpy(data, t->data, nbytes < t->nbytes ? nbytes : t->nbytes);
        stw_add(w, t->name, dt, t->ndim, shape, data, nbytes);
    }
    if (extra_name) {
        int64_t shape[1] = {4};
        stw_add(w, extra_name, ST_F32, 1, shape, xcalloc(16, 1), 16);
    }
    st_close(src);
    mkdir(path_of("edit"), 0755);
    CHECK(stw_write(w, path_of("edit"), 1, err, sizeof err) == 0);
    stw_free(w);
    model_weights_t mw;
    err[0] = 0;
    int rc = model_weights_load(&mw, &cfg, path_of("edit"), err, sizeof err);
    if (!want) {
        CHECKF(rc == 0, "%s", err);
        if (!rc) {
            CHECK(mw.n_skipped_mtp == (extra_name && !strncmp(extra_name, "mtp.", 4)));
            CHECK(mw.n_skipped_vision == (extra_name && !strncmp(extra_name, "vision.", 7)));
            model_weights_free(&mw);
        }
        return;
    }
    CHECKF(rc != 0 && strstr(err, want), "error \"%s\", wanted \"%s\"", err, want);
}

static bool drop_wkv(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)dt, (void)shape, (void)nbytes;
    return strcmp(name, "layers.3.attn.wkv.weight") != 0;
}
static bool drop_scale(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)dt, (void)shape, (void)nbytes;
    return strcmp(name, "layers.5.ffn.experts.1.w2.scale") != 0;
}
static bool drop_gate(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)dt, (void)shape, (void)nbytes;
    return strcmp(name, "layers.2.attn.compressor.wgate.weight") != 0;
}
static bool reshape_norm(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)dt;
    if (!strcmp(name, "layers.6.attn.q_norm.weight")) shape[0]--, *nbytes -= 2;
    return true;
}
static bool retype_sink(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)shape;
    if (!strcmp(name, "layers.0.attn.attn_sink")) *dt = ST_BF16, *nbytes /= 2;
    return true;
}
static bool retype_expert(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)shape, (void)nbytes;
    if (!strcmp(name, "layers.4.ffn.experts.7.w3.weight")) *dt = ST_U16, shape[1] /= 2;
    return true;
}
static bool reshape_scale(const char *name, st_dtype_t *dt, int64_t *shape, size_t *nbytes) {
    (void)dt;
    if (!strcmp(name, "layers.1.attn.wq_b.scale")) shape[1]--, *nbytes -= (size_t)shape[0];
    return true;
}

static void test_bad_checkpoints(void) {
    rewrite(NULL, NULL, NULL);
    rewrite(NULL, "mtp.0.main_norm.weight", NULL);
    rewrite(NULL, "vision.norm.weight", NULL);
    rewrite(NULL, "layers.0.attn.bogus", "unexpected tensor 'layers.0.attn.bogus'");
    rewrite(NULL, "layers.9.attn_norm.weight", "unexpected tensor 'layers.9.attn_norm.weight'");
    rewrite(NULL, "layers.3.attn.compressor.wgate.weight", "unexpected tensor 'layers.3.attn.compressor.wgate.weight'");
    rewrite(drop_wkv, NULL, "missing tensor 'layers.3.attn.wkv.weight'");
    rewrite(drop_scale, NULL, "missing tensor 'layers.5.ffn.experts.1.w2.scale'");
    rewrite(drop_gate, NULL, "missing tensor 'layers.2.attn.compressor.wgate.weight'");
    rewrite(reshape_norm, NULL, "tensor 'layers.6.attn.q_norm.weight': shape [63], expected [64]");
    rewrite(retype_sink, NULL, "tensor 'layers.0.attn.attn_sink': dtype BF16 not accepted");
    rewrite(retype_expert, NULL, "tensor 'layers.4.ffn.experts.7.w3.weight': dtype U16 not accepted");
    rewrite(reshape_scale, NULL, "tensor 'layers.1.attn.wq_b.scale': shape");
    model_weights_t mw;
    CHECK(model_weights_load(&mw, &cfg, "/nonexistent", err, sizeof err) != 0 && strstr(err, "/nonexistent"));
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/di-test-mw-XXXXXX");
    if (!mkdtemp(root)) return 1;
    if (mkmodel_config("a", 64, &cfg, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    RUN(test_variants_agree);
    RUN(test_bad_checkpoints);
    t_remove_tree(root);
    return t_finish();
}
