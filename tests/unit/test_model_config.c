/* config.json parsing and the derived schedule: the released V4.1-Flash values
 * (MODEL_V41.md §1), the reference config's spellings, the tiny presets, and bad configs. */
#include "mkmodel.h"
#include "model_config.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

/* The released config.json (MODEL_V41 §1.1). */
static const char *FLASH =
    "{\"architectures\":[\"DeepseekV41ForCausalLM\"],\"model_type\":\"deepseek_v41\",\"dtype\":\"bfloat16\","
    "\"bos_token_id\":0,\"eos_token_id\":1,\"pad_token_id\":2,\"image_token_id\":129264,\"tie_word_embeddings\":false,"
    "\"quantization_config\":{\"quant_method\":\"fp8\",\"activation_scheme\":\"dynamic\",\"weight_block_size\":[32,32],"
    "\"scale_fmt\":\"ue8m0\",\"expert_dtype\":\"fp4\"},"
    "\"vision_config\":{\"num_hidden_layers\":32,\"hidden_size\":1024,\"num_attention_heads\":16},"
    "\"text_config\":{\"model_type\":\"deepseek_v41_text\",\"vocab_size\":129280,\"hidden_size\":5120,"
    "\"num_hidden_layers\":40,\"num_attention_heads\":64,\"num_key_value_heads\":1,\"head_dim\":512,"
    "\"qk_rope_head_dim\":64,\"q_lora_rank\":1280,\"o_groups\":8,\"o_lora_rank\":1024,\"hidden_act\":\"silu\","
    "\"swiglu_limit\":10.0,\"rms_norm_eps\":1e-20,\"attention_bias\":false,\"max_position_embeddings\":1048576,"
    "\"rope_theta\":10000,\"compress_rope_theta\":160000,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":16,"
    "\"beta_fast\":32,\"beta_slow\":1,\"original_max_position_embeddings\":65536},\"n_routed_experts\":384,"
    "\"n_shared_experts\":1,\"num_experts_per_tok\":6,\"moe_intermediate_size\":2304,\"scoring_func\":\"sqrtsoftplus\","
    "\"topk_method\":\"noaux_tc\",\"norm_topk_prob\":true,\"routed_scaling_factor\":1.5,\"sliding_window\":128,"
    "\"compress_ratios\":[0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0],"
    "\"kv_source_layer_ids\":[2,8,14,20],\"index_source_layer_ids\":[2,8,14,20,24,28,32,36],"
    "\"candidate_source_layer_id\":20,\"candidate_topk_blocks\":2048,\"candidate_block_size\":8,\"index_n_heads\":32,"
    "\"index_head_dim\":128,\"index_topk\":512,\"hc_mult\":4,\"hc_sinkhorn_iters\":20,\"hc_eps\":1e-6,"
    "\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":[384006168,384016682],\"engram_max_ngram_size\":4,"
    "\"engram_n_heads\":8,\"engram_head_dim\":256,\"engram_vocab_size\":16000000,\"engram_pad_token_id\":2,"
    "\"engram_compressed_vocab_size\":99092,\"num_nextn_predict_layers\":3,\"dspark_block_size\":5,"
    "\"dspark_noise_token_id\":128799,\"dspark_target_layer_ids\":[37,38,39],\"dspark_markov_rank\":256,"
    "\"dspark_n_routed_experts\":128,\"dspark_num_experts_per_tok\":3}}";

static int parse_text(const char *text, model_config_t *c) { return model_config_parse(text, strlen(text), c, err, sizeof err); }

static void test_flash_fields(void) {
    model_config_t c;
    CHECKF(parse_text(FLASH, &c) == 0, "%s", err);
    CHECK(c.vocab_size == 129280 && c.hidden_size == 5120 && c.n_layers == 40 && c.n_heads == 64 && c.head_dim == 512);
    CHECK(c.rope_dim == 64 && c.q_lora_rank == 1280 && c.o_groups == 8 && c.o_lora_rank == 1024);
    CHECK(c.rms_norm_eps == 1e-20 && c.swiglu_limit == 10.0 && c.gate_temp == 1.0 && c.n_shared_experts == 1);
    CHECK(c.yarn && c.yarn_factor == 16 && c.yarn_beta_fast == 32 && c.yarn_beta_slow == 1 && c.yarn_original_max_pos == 65536);
    CHECK(c.n_routed_experts == 384 && c.n_experts_per_tok == 6 && c.moe_inter == 2304 && c.routed_scaling_factor == 1.5);
    CHECK(c.sliding_window == 128 && c.index_n_heads == 32 && c.index_head_dim == 128 && c.index_topk == 512);
    CHECK(c.candidate_source == 20 && c.candidate_topk_blocks == 2048 && c.candidate_block_size == 8);
    CHECK(c.n_engram == 2 && c.engram_rows[0] == 384006168 && c.engram_rows[1] == 384016682 && c.engram_pad_id == 2);
    CHECK(c.engram_compressed_vocab == 99092 && c.n_mtp == 3 && c.n_compress_ratios == 43);
    CHECK(c.quantized && c.quant_block_rows == 32 && c.quant_block_cols == 32);
    CHECK(c.bos_token_id == 0 && c.eos_token_id == 1 && c.pad_token_id == 2 && c.image_token_id == 129264);
    CHECK(c.n_dspark_targets == 3 && c.dspark_targets[2] == 39 && c.dspark_noise_token_id == 128799);
}

/* MODEL_V41 §1.3, row by row. */
static void test_flash_schedule(void) {
    model_config_t c;
    CHECKF(parse_text(FLASH, &c) == 0, "%s", err);
    int count[4] = {0};
    for (int L = 0; L < 40; L++) count[c.layers[L].mode]++;
    CHECK(count[ATTN_SWA] == 2 && count[ATTN_FULL] == 4 && count[ATTN_REINDEX] == 4 && count[ATTN_REUSE] == 30);
    CHECK_EQ(c.first_decoder_layer, 20);
    for (int L = 0; L < 40; L++) {
        const layer_sched_t *s = &c.layers[L];
        int pool = L < 2 ? -1 : L < 8 ? 2 : L < 14 ? 8 : L < 20 ? 14 : 20;
        int topk = L < 2 ? -1 : L < 20 ? pool : L < 24 ? 20 : L < 28 ? 24 : L < 32 ? 28 : L < 36 ? 32 : 36;
        bool full = L == 2 || L == 8 || L == 14 || L == 20, reindex = L >= 24 && L % 4 == 0;
        attn_mode_t mode = L < 2 ? ATTN_SWA : full ? ATTN_FULL : reindex ? ATTN_REINDEX : ATTN_REUSE;
        CHECKF(s->mode == mode && s->kv_source == pool && s->topk_source == topk, "layer %d: %s pool %d topk %d", L,
               attn_mode_name(s->mode), s->kv_source, s->topk_source);
        CHECKF(s->ratio == (L < 2 ? 0 : L < 20 ? 2 : 1) && s->decoder == (L >= 20) && s->rope == (L < 2 ? ROPE_MAIN : ROPE_COMPRESS),
               "layer %d ratio/half/rope", L);
        CHECKF(s->has_compressor == full && s->compressor_gate == (full && L < 20) && s->indexer_keys == full &&
                   s->has_indexer == (full || reindex),
               "layer %d owned tensors", L);
        CHECKF(s->candidate_source == (L == 20) && s->uses_candidates == reindex, "layer %d candidates", L);
        CHECKF(s->engram == (L == 1 ? 0 : L == 14 ? 1 : -1), "layer %d engram", L);
    }
}

/* The released test vectors of §5.2: first and last primes, table sizes. */
static void test_engram_primes(void) {
    model_config_t c;
    CHECKF(parse_text(FLASH, &c) == 0, "%s", err);
    int64_t p[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    CHECK_EQ(engram_primes(&c, p), 0);
    CHECK(p[0][0] == 16000057 && p[0][1] == 16000079 && p[0][2] == 16000081);
    CHECK(p[1][21] == 16000877 && p[1][22] == 16000879 && p[1][23] == 16000889);
}

/* Edits FLASH: key "a.b" sets text_config.a.b style paths; value NULL deletes. */
static char *edited(const char *where, const char *key, const char *value) {
    json_t *root = json_loads(FLASH, 0, NULL);
    json_t *obj = strcmp(where, "top") ? json_object_get(root, where) : root;
    if (value) json_object_set_new(obj, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else json_object_del(obj, key);
    char *s = json_dumps(root, 0);
    json_decref(root);
    return s;
}

static void expect(const char *where, const char *key, const char *value, const char *want) {
    char *text = edited(where, key, value);
    model_config_t c;
    err[0] = 0;
    int rc = parse_text(text, &c);
    CHECKF(rc != 0 && strstr(err, want), "%s.%s = %s: error \"%s\", wanted \"%s\"", where, key, value ? value : "(deleted)", err, want);
    free(text);
}

static void test_bad_configs(void) {
    expect("text_config", "sliding_window", NULL, "missing field 'sliding_window'");
    expect("text_config", "hidden_size", "\"5120\"", "'hidden_size' must be an integer");
    expect("text_config", "rms_norm_eps", "\"x\"", "'rms_norm_eps' must be a number");
    expect("text_config", "num_hidden_layers", "1000", "'num_hidden_layers' must be an integer in [1, 256]");
    expect("text_config", "hidden_act", "\"gelu\"", "'hidden_act'");
    expect("text_config", "compress_ratios", "[0,0,2]", "'compress_ratios' has 3 entries");
    expect("text_config", "compress_ratios",
           "[0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,4]", "DSpark stage");
    expect("text_config", "compress_ratios",
           "[0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,1,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "before the decoder half");
    expect("text_config", "kv_source_layer_ids", "[1,8,14,20]", "kv source layer 1");
    expect("text_config", "kv_source_layer_ids", "[8,2,14,20]", "strictly increasing");
    expect("text_config", "index_source_layer_ids", "[2,8,14,24]", "kv source layer 20 is not an index source");
    expect("text_config", "candidate_source_layer_id", "21", "not an index source");
    expect("text_config", "engram_num_embeddings", "[384006168,384016683]", "prime layout gives 384016682");
    expect("text_config", "engram_num_embeddings", "[384006168]", "has 1 entries");
    expect("text_config", "head_dim", "500", "multiples of 32");
    expect("text_config", "n_shared_experts", "2", "'n_shared_experts'");
    expect("text_config", "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":16}", "original_max_position_embeddings");
    expect("text_config", "rope_scaling", "{\"rope_type\":\"linear\",\"factor\":2}", "not supported");
    expect("text_config", "window_size", "64", "'sliding_window' and 'window_size' are both given and disagree");
    expect("text_config", "model_type", "\"llama\"", "not a DeepSeek-V4.1");
    expect("top", "model_type", "\"deepseek_v4\"", "deepseek_v4 is not supported yet");
    expect("top", "tie_word_embeddings", "true", "tie_word_embeddings");
    expect("top", "quantization_config", "{\"quant_method\":\"gptq\"}", "quant_method");
    expect("top", "text_config", "[]", "'text_config' must be an object");
    model_config_t c;
    CHECK(parse_text("{\"text_config\":", &c) != 0 && strstr(err, "not valid JSON"));
}

/* The flat text config and the reference spellings (§1.2) give the same schedule. */
static void test_flat_and_aliases(void) {
    json_t *root = json_loads(FLASH, 0, NULL);
    json_t *text = json_deep_copy(json_object_get(root, "text_config"));
    static const char *const RENAME[][2] = {{"hidden_size", "dim"}, {"num_hidden_layers", "n_layers"},
                                             {"num_attention_heads", "n_heads"}, {"sliding_window", "window_size"},
                                             {"routed_scaling_factor", "route_scale"}, {"rms_norm_eps", "norm_eps"},
                                             {"kv_source_layer_ids", "kv_source_layers"}, {"engram_pad_token_id", "engram_pad_id"}};
    for (size_t i = 0; i < DI_ARRAY_LEN(RENAME); i++) {
        json_object_set(text, RENAME[i][1], json_object_get(text, RENAME[i][0]));
        json_object_del(text, RENAME[i][0]);
    }
    json_object_del(text, "rope_scaling");
    json_object_set_new(text, "rope_factor", json_integer(16));
    json_object_set_new(text, "original_seq_len", json_integer(65536));
    char *s = json_dumps(text, 0);
    model_config_t flat, ref;
    CHECKF(parse_text(s, &flat) == 0, "%s", err);
    CHECKF(parse_text(FLASH, &ref) == 0, "%s", err);
    CHECK(flat.hidden_size == 5120 && flat.sliding_window == 128 && flat.yarn && flat.yarn_original_max_pos == 65536);
    CHECK(!flat.quantized && flat.image_token_id == -1);
    CHECK(!memcmp(flat.layers, ref.layers, sizeof ref.layers) && flat.first_decoder_layer == 20);
    free(s);
    json_decref(text);
    json_decref(root);
}

static void test_tiny_presets(void) {
    model_config_t a, b;
    CHECKF(mkmodel_config("a", 512, &a, err, sizeof err) == 0, "%s", err);
    CHECKF(mkmodel_config("b", 320, &b, err, sizeof err) == 0, "%s", err);
    static const attn_mode_t MA[8] = {ATTN_SWA, ATTN_SWA, ATTN_FULL, ATTN_REUSE, ATTN_FULL, ATTN_REUSE, ATTN_REINDEX, ATTN_REUSE};
    static const int TA[8] = {-1, -1, 2, 2, 4, 4, 6, 6}, PA[8] = {-1, -1, 2, 2, 4, 4, 4, 4};
    for (int L = 0; L < 8; L++)
        CHECKF(a.layers[L].mode == MA[L] && a.layers[L].topk_source == TA[L] && a.layers[L].kv_source == PA[L],
               "tiny a layer %d", L);
    CHECK(a.first_decoder_layer == 4 && a.layers[4].candidate_source && a.layers[6].uses_candidates);
    CHECK(a.layers[2].compressor_gate && !a.layers[4].compressor_gate && a.layers[1].engram == 0 && a.layers[2].engram == 1);
    static const attn_mode_t MB[12] = {ATTN_SWA, ATTN_SWA, ATTN_FULL, ATTN_REUSE, ATTN_FULL, ATTN_REUSE,
                                       ATTN_FULL, ATTN_REUSE, ATTN_REINDEX, ATTN_REUSE, ATTN_REINDEX, ATTN_REUSE};
    for (int L = 0; L < 12; L++) CHECKF(b.layers[L].mode == MB[L], "tiny b layer %d", L);
    CHECK(b.first_decoder_layer == 6 && b.layers[9].topk_source == 8 && b.layers[11].topk_source == 10 && b.layers[5].kv_source == 4);
    CHECK(a.engram_rows[0] > 0 && b.engram_rows[1] > 0);
    CHECK(mkmodel_config("c", 512, &a, err, sizeof err) != 0 && strstr(err, "unknown preset"));
}

/* The generator's config.json parses back to the same config. */
static void test_written_config_round_trip(void) {
    char dir[] = "/tmp/di-test-cfg-XXXXXX";
    if (!mkdtemp(dir)) return;
    for (int k = 0; k < 2; k++) {
        model_config_t c, back;
        CHECK(mkmodel_config(k ? "b" : "a", k ? 320 : MKMODEL_FULL_VOCAB, &c, err, sizeof err) == 0);
        c.quantized = k == 0;
        CHECKF(mkmodel_write(&c, 5, 1, dir, err, sizeof err) == 0, "%s", err);
        CHECKF(model_config_load(dir, &back, err, sizeof err) == 0, "%s", err);
        if (!c.quantized) back.quant_block_rows = back.quant_block_cols = 32; /* not in a bf16 config.json */
        back.n_dspark_targets = c.n_dspark_targets; /* written for HF, not part of the preset */
        memcpy(back.dspark_targets, c.dspark_targets, sizeof c.dspark_targets);
        CHECKF(!memcmp(&c, &back, sizeof c), "preset %s: config.json does not round-trip", k ? "b" : "a");
    }
    t_remove_tree(dir);
    model_config_t c;
    CHECK(model_config_load("/nonexistent", &c, err, sizeof err) != 0 && strstr(err, "/nonexistent"));
}

int main(void) {
    RUN(test_flash_fields);
    RUN(test_flash_schedule);
    RUN(test_engram_primes);
    RUN(test_bad_configs);
    RUN(test_flat_and_aliases);
    RUN(test_tiny_presets);
    RUN(test_written_config_round_trip);
    return t_finish();
}
