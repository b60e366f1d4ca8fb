/* di-mkmodel: writes a deterministic tiny DeepSeek-V4.1 checkpoint (lib/mkmodel.h). */
#include "cli.h"
#include "log.h"
#include "mkmodel.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* mkdir -p */
static void make_dirs(const char *path) {
    char *p = xstrdup(path);
    for (char *s = p + 1;; s++) {
        bool end = !*s;
        if (*s == '/' || end) {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) die("%s: %s", p, strerror(errno));
            if (end) break;
            *s = '/';
        }
    }
    free(p);
}

int main(int argc, char **argv) {
    const char *out = NULL, *variant = "fp8", *preset = "a";
    int64_t seed = 1, vocab = MKMODEL_FULL_VOCAB, shards = 1;
    cli_opt_t opts[] = {
        {"out", CLI_STRING, &out, "DIR", "directory to write (created if missing)", 0, 0},
        {"seed", CLI_INT, &seed, "N", "random seed (default 1)", 0, INT64_MAX},
        {"vocab", CLI_INT, &vocab, "N", "vocabulary size (default 129280, the real tokenizer's)", 16, MKMODEL_FULL_VOCAB},
        {"variant", CLI_STRING, &variant, "fp8|bf16", "fp8: FP8/FP4 as released (default); bf16: the same weights dequantized", 0, 0},
        {"preset", CLI_STRING, &preset, "a|b|m", "a: 8 layers (default); b: 12 layers, other sizes; m: mid-size (16 layers, hidden 1024)", 0, 0},
        {"shards", CLI_INT, &shards, "N", "write N shards with an index instead of one file", 1, 64},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-mkmodel",
        .usage = "--out DIR [--seed N] [--vocab N] [--variant fp8|bf16] [--preset a|b|m] [--shards N]",
        .summary = "Writes a tiny DeepSeek-V4.1 checkpoint (config.json + safetensors in the official layout)\n"
                   "generated deterministically from the seed: the released layer schedule scaled down.",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);
    if (!out) die("--out DIR is required");
    if (strcmp(variant, "fp8") && strcmp(variant, "bf16")) die("--variant must be fp8 or bf16");
    model_config_t c;
    char err[512];
    if (mkmodel_config(preset, vocab, &c, err, sizeof err)) die("%s", err);
    c.quantized = !strcmp(variant, "fp8");
    make_dirs(out);
    if (mkmodel_write(&c, (uint64_t)seed, (int)shards, out, err, sizeof err)) die("%s", err);
    log_info("wrote preset %s, %s, vocab %lld, seed %lld to %s", preset, variant, (long long)vocab, (long long)seed, out);
    return 0;
}
