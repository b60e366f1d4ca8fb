#include "testmodel.h"
#include "mkmodel.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The folder names come from the tests themselves (mkdtemp), never from input. */
static int shell(const char *fmt, const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, fmt, dir);
    return system(cmd);
}

int t_tiny_model(const char *dir, const char *preset, int64_t vocab, uint64_t seed, bool quantized, char *err,
                 size_t errlen) {
    model_config_t mc;
    if (shell("mkdir -p '%s'", dir)) {
        snprintf(err, errlen, "cannot make %s", dir);
        return -1;
    }
    if (mkmodel_config(preset, vocab, &mc, err, errlen)) return -1;
    mc.quantized = quantized;
    return mkmodel_write(&mc, seed, 1, dir, err, errlen);
}

void t_remove_tree(const char *dir) {
    if (shell("rm -rf '%s'", dir)) fprintf(stderr, "could not remove %s\n", dir);
}

json_t *t_golden_config(const json_t *index, const char *name) {
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(index, "configs"), i, e) {
        if (!strcmp(json_string_value(json_object_get(e, "config")), name)) return e;
    }
    return NULL;
}

uint32_t *t_golden_sequence(const json_t *config, const char *which, size_t *n) {
    json_t *s = json_object_get(json_object_get(config, "sequences"), which);
    *n = json_array_size(s);
    uint32_t *ids = xmalloc(*n * 4 + 4);
    for (size_t i = 0; i < *n; i++) ids[i] = (uint32_t)json_integer_value(json_array_get(s, i));
    return ids;
}

float *t_golden_floats(const char *config, const char *key, size_t want) {
    char path[256];
    snprintf(path, sizeof path, T_GOLDEN "/%s.%s.f32", config, key);
    size_t len = 0;
    float *v = (float *)read_file(path, &len);
    if (v && len == want * 4) return v;
    free(v);
    return NULL;
}
