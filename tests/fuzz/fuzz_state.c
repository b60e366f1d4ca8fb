/* libFuzzer target: any byte string as a serialized sequence state (docs/STATE.md) for a
 * generated tiny model. Deserializing must either fail with a message or give a state that
 * serializes and deserializes again and that the forward can run a step on (ASan and UBSan
 * watch both). Seeds: tests/fuzz/corpus/fuzz_state/ (states of this model: QAT on and off,
 * several positions). */
#include "backend_cpu.h"
#include "forward.h"
#include "mkmodel.h"
#include "seqstate_io.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[] = "/tmp/di-fuzz-state-XXXXXX";
static backend_t *bk;
static model_t model;

static void cleanup(void) {
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[512];
    model_config_t c;
    if (!mkdtemp(dir) || mkmodel_config("a", 64, &c, err, sizeof err)) abort();
    atexit(cleanup);
    c.quantized = true;
    bk = backend_cpu_create(1);
    if (mkmodel_write(&c, 5, 1, dir, err, sizeof err) || model_open(&model, dir, bk, NULL, err, sizeof err)) {
        fprintf(stderr, "fuzz_state: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *img = malloc(size ? size : 1); /* exact size: any overread is outside it */
    memcpy(img, data, size);
    char err[512] = "";
    seqstate_t *st = seqstate_deserialize(&model, img, size, err, sizeof err);
    if (!st) {
        if (!err[0]) abort(); /* a refusal names its reason */
    } else {
        buf_t b = {0};
        seqstate_serialize(st, &b);
        seqstate_t *again = seqstate_deserialize(&model, b.data, b.len, err, sizeof err);
        if (!again) abort(); /* what we write we must read */
        float logits[64];
        if (forward_step(again, 3, logits, err, sizeof err)) abort();
        seqstate_free(again);
        seqstate_free(st);
        buf_free(&b);
    }
    free(img);
    return 0;
}
