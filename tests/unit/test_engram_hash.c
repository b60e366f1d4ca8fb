/* Engram hashing (MODEL_V41 §5.2): numpy-compatible multipliers (the released config's test
 * vectors and raw numpy streams), the prime layout, the constants transformers used for the
 * goldens (tests/data/golden/index.json), row ids against a direct transcription of §5.2, and
 * the token-map loader's refusals. */
#include "engram_hash.h"
#include "mkmodel.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static void test_numpy_streams(void) {
    /* numpy 2.4: default_rng(seed).integers(0, bound, size=5, dtype=int64) */
    struct {
        uint64_t seed;
        int64_t bound, want[5];
    } cases[] = {
        {0, (int64_t)1 << 62, {2937467307694268567, 1244171615822312904, 188957027462249006, 76220265684581383, 3750546991322993742}},
        {1099511627783ull, 1000000000000, {829812891829, 255305158349, 153790715852, 674504545867, 738840719192}},
        {UINT64_MAX, 8589934597, {5841384696, 7261172720, 63591986, 7684281698, 1107802929}},
        {123456789012345ull, 5000000000, {2650034839, 222210470, 3786804956, 2360512094, 3079293404}},
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(cases); i++) {
        int64_t got[5];
        CHECK(numpy_integers(cases[i].seed, cases[i].bound, 5, got) == 0);
        CHECKF(!memcmp(got, cases[i].want, sizeof got), "seed %llu: %lld ...", (unsigned long long)cases[i].seed, (long long)got[0]);
    }
    int64_t x;
    CHECK(numpy_integers(1, 1000, 1, &x) == -1); /* numpy's 32-bit path: refused, not faked */
}

static void test_released_config_vectors(void) {
    uint64_t m[4];
    const uint64_t l1[4] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
    const uint64_t l14[4] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
    CHECK(engram_multipliers(1, 4, 99092, m) == 0 && !memcmp(m, l1, sizeof m));
    CHECK(engram_multipliers(14, 4, 99092, m) == 0 && !memcmp(m, l14, sizeof m));
    model_config_t c = {.n_engram = 2, .engram_layers = {1, 14}, .engram_max_ngram = 4, .engram_n_heads = 8,
                        .engram_vocab_size = 16000000};
    int64_t p[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    CHECK(engram_primes(&c, p) == 0);
    CHECK(p[0][0] == 16000057 && p[0][1] == 16000079 && p[0][2] == 16000081);
    CHECK(p[1][21] == 16000877 && p[1][22] == 16000879 && p[1][23] == 16000889);
    int64_t rows[2] = {0, 0};
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 24; k++) rows[e] += p[e][k];
    CHECK(rows[0] == 384006168 && rows[1] == 384016682);
}

/* §5.2 transcribed: look-back blocked at the start, XOR of products, mod prime plus offset. */
static void rows_ref(json_t *lay, int e, const int32_t *hist, int64_t pos, int32_t *out) {
    json_t *primes = json_array_get(json_object_get(lay, "primes"), (size_t)e);
    json_t *offsets = json_array_get(json_object_get(lay, "offsets"), (size_t)e);
    json_t *mult = json_array_get(json_object_get(lay, "multipliers"), (size_t)e);
    int64_t pad = json_integer_value(json_object_get(lay, "pad_compressed_id"));
    size_t nmax = json_array_size(mult), heads = json_array_size(json_array_get(primes, 0));
    uint64_t h = 0;
    bool blocked = false;
    for (size_t s = 0; s < nmax; s++) {
        blocked = blocked || pos - (int64_t)s < 0;
        uint64_t tok = (uint64_t)(blocked ? pad : hist[pos - (int64_t)s]);
        h = s ? h ^ tok * (uint64_t)json_integer_value(json_array_get(mult, s)) : tok * (uint64_t)json_integer_value(json_array_get(mult, s));
        for (size_t j = 0; s && j < heads; j++) {
            uint64_t p = (uint64_t)json_integer_value(json_array_get(json_array_get(primes, s - 1), j));
            out[(s - 1) * heads + j] = (int32_t)(h % p + (uint64_t)json_integer_value(json_array_get(offsets, (s - 1) * heads + j)));
        }
    }
}

static void test_golden_constants_and_rows(void) {
    json_t *index = json_load_file("tests/data/golden/index.json", 0, NULL);
    CHECK(index != NULL);
    char tmp[] = "/tmp/di-engram-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    json_t *cfg;
    size_t ci;
    json_array_foreach(json_object_get(index, "configs"), ci, cfg) {
        json_t *mk = json_object_get(cfg, "mkmodel"), *lay = json_object_get(cfg, "engram_layout");
        model_config_t c;
        CHECK(mkmodel_config(json_string_value(json_object_get(mk, "preset")), json_integer_value(json_object_get(mk, "vocab")), &c,
                             err, sizeof err) == 0);
        CHECKF(mkmodel_write(&c, (uint64_t)json_integer_value(json_object_get(mk, "seed")), 1, tmp, err, sizeof err) == 0, "%s", err);
        char path[128];
        snprintf(path, sizeof path, "%s/engram_token_map.u32", tmp);
        uint32_t *map = NULL;
        engram_hash_t h;
        CHECKF(engram_map_load(path, &c, &map, err, sizeof err) == 0, "%s", err);
        CHECKF(map && engram_hash_init(&h, &c, map, err, sizeof err) == 0, "%s", err);
        if (!map) continue;
        int bad = 0;
        for (int e = 0; e < h.n_layers; e++) {
            for (int k = 0; k < h.n_orders * h.n_heads; k++) {
                json_t *pr = json_array_get(json_array_get(json_object_get(lay, "primes"), (size_t)e), (size_t)(k / h.n_heads));
                bad += h.primes[e][k] != json_integer_value(json_array_get(pr, (size_t)(k % h.n_heads)));
                bad += h.offsets[e][k] != json_integer_value(json_array_get(json_array_get(json_object_get(lay, "offsets"), (size_t)e), (size_t)k));
            }
            for (int s = 0; s < h.max_ngram; s++)
                bad += h.mult[e][s] != (uint64_t)json_integer_value(json_array_get(json_array_get(json_object_get(lay, "multipliers"), (size_t)e), (size_t)s));
        }
        CHECK_EQ(bad, 0);
        CHECK_EQ(h.pad, json_integer_value(json_object_get(lay, "pad_compressed_id")));
        /* rows for every position of both golden sequences */
        const char *seqs[] = {"long", "repeat"};
        int row_bad = 0;
        for (int q = 0; q < 2; q++) {
            json_t *ids = json_object_get(json_object_get(cfg, "sequences"), seqs[q]);
            size_t n = json_array_size(ids);
            int32_t *hist = xmalloc(n * 4);
            for (size_t i = 0; i < n; i++) hist[i] = engram_compress(&h, (uint32_t)json_integer_value(json_array_get(ids, i)));
            for (size_t i = 0; i < n; i++)
                for (int e = 0; e < h.n_layers; e++) {
                    int32_t ctx[MC_MAX_NGRAM], got[64], want[64];
                    for (int s = 0; s < h.max_ngram; s++) ctx[s] = (int64_t)i - s >= 0 ? hist[i - (size_t)s] : ENGRAM_DEAD;
                    engram_rows(&h, e, ctx, got);
                    rows_ref(lay, e, hist, (int64_t)i, want);
                    row_bad += memcmp(got, want, (size_t)(h.n_orders * h.n_heads) * 4) != 0;
                }
            free(hist);
        }
        CHECK_EQ(row_bad, 0);
        engram_hash_free(&h);
    }
    t_remove_tree(tmp);
    json_decref(index);
}

static void write_map(const char *path, const uint32_t *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(v, 4, n, f);
        fclose(f);
    }
}

static void test_map_refusals(void) {
    model_config_t c = {.vocab_size = 6, .engram_compressed_vocab = 4};
    const char *path = "/tmp/di-engram-map.u32";
    uint32_t good[6] = {0, 1, 2, 3, 1, 0}, *map = NULL;
    write_map(path, good, 6);
    CHECK(engram_map_load(path, &c, &map, err, sizeof err) == 0 && map && map[4] == 1);
    free(map);
    write_map(path, good, 5);
    CHECK(engram_map_load(path, &c, &map, err, sizeof err) == -1 && strstr(err, "expected 24"));
    uint32_t big[6] = {0, 1, 2, 3, 4, 0};
    write_map(path, big, 6);
    CHECK(engram_map_load(path, &c, &map, err, sizeof err) == -1 && strstr(err, "token 4 maps to 4"));
    uint32_t few[6] = {0, 1, 2, 2, 1, 0};
    write_map(path, few, 6);
    CHECK(engram_map_load(path, &c, &map, err, sizeof err) == -1 && strstr(err, "3 distinct ids"));
    remove(path);
    CHECK(engram_map_load(path, &c, &map, err, sizeof err) == -1 && strstr(err, path));
}

int main(void) {
    RUN(test_numpy_streams);
    RUN(test_released_config_vectors);
    RUN(test_golden_constants_and_rows);
    RUN(test_map_refusals);
    return t_finish();
}
