/* CUDA benchmark (issue 5), one run: the device's ceilings (copy bandwidth, cuBLASLt bf16 and
 * FP8 GEMM rates), decode steps at several batch sizes and contexts, prefill tokens/s, and a
 * per-op time breakdown, on DeepSeek-V4.1-Flash shapes.
 *
 *   cuda_bench --random-weights [--layers N] [--batches 1,8,64,256] [--contexts 4000,32000]
 *              [--steps N] [--prefill 8192x1,2048x8] [--gemm N] [--no-decode] [--no-prefill]
 *              [--no-sample]
 *
 * --random-weights (benchmark only, never the default of any tool): every weight is synthesized
 * on the device in its released storage format (FP8 32x32 dense, FP4 1x32 experts, BF16, F32),
 * values uniform with the fan-in's scale, so the timings are the real shapes' but the outputs
 * mean nothing. --layers N builds a full-width model with N layers (V4.1-Flash needs at least
 * four H200s for its 40): the first half encoder (SWA 0-1, Engram at 1, Full ratio-2 sources
 * every 6 layers from 2, Reuse between), the second half decoder (Full ratio-1 candidate source
 * first, Reindex every 4 layers, Reuse between); --layers 40 is the released schedule. The
 * Engram tables are smaller than released (engram_vocab_size 160000: about 3.8M rows instead
 * of 384M, in page-locked host memory like the real ones); a token reads 24 random rows per
 * Engram layer either way. Decode contexts are synthesized states (random pools, keys and
 * windows of the stated length; the indexer keys fake-quantized to FP4 as the model stores
 * them), not prefilled. Sampling: the pick op at each batch size on
 * random logits of the released vocabulary, per kind of request, against the host sampler on
 * the same rows (one core of the GPU machine). */
#include "backend_cuda.h"
#include "forward.h"
#include "rope.h"
#include "sampler.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGRAM_BENCH_VOCAB 160000

/* ---- the model ------------------------------------------------------------------------------ */
static void flash_config(int N, model_config_t *c) {
    memset(c, 0, sizeof *c);
    c->arch = ARCH_DEEPSEEK_V41;
    c->vocab_size = 129280, c->hidden_size = 5120, c->n_layers = N;
    c->n_heads = 64, c->n_kv_heads = 1, c->head_dim = 512, c->rope_dim = 64, c->q_lora_rank = 1280;
    c->o_groups = 8, c->o_lora_rank = 1024, c->swiglu_limit = 10, c->rms_norm_eps = 1e-20;
    c->max_position_embeddings = 1048576, c->rope_theta = 10000, c->compress_rope_theta = 160000;
    c->yarn = true, c->yarn_factor = 16, c->yarn_beta_fast = 32, c->yarn_beta_slow = 1, c->yarn_original_max_pos = 65536;
    c->n_routed_experts = 384, c->n_shared_experts = 1, c->n_experts_per_tok = 6, c->moe_inter = 2304;
    c->routed_scaling_factor = 1.5, c->gate_temp = 1, c->norm_topk_prob = true, c->sliding_window = 128;
    int enc = N / 2;
    c->n_compress_ratios = N;
    for (int L = 0; L < N; L++) c->compress_ratios[L] = L < 2 ? 0 : L < enc ? 2 : 1;
    for (int L = 2; L < enc; L += 6) c->kv_sources[c->n_kv_sources++] = L, c->index_sources[c->n_index_sources++] = L;
    c->kv_sources[c->n_kv_sources++] = enc;
    c->index_sources[c->n_index_sources++] = enc;
    for (int L = enc + 4; L < N; L += 4) c->index_sources[c->n_index_sources++] = L;
    if (N - enc <= 4 && enc + 2 < N) c->index_sources[c->n_index_sources++] = enc + 2; /* a Reindex layer in short models */
    c->candidate_source = enc, c->candidate_topk_blocks = 2048, c->candidate_block_size = 8;
    c->index_n_heads = 32, c->index_head_dim = 128, c->index_topk = 512;
    c->hc_mult = 4, c->hc_sinkhorn_iters = 20, c->hc_eps = 1e-6;
    int eng[] = {1, 14};
    for (int i = 0; i < 2; i++)
        if (eng[i] < N) c->engram_layers[c->n_engram++] = eng[i];
    c->n_engram_rows = c->n_engram;
    c->engram_max_ngram = 4, c->engram_n_heads = 8, c->engram_head_dim = 256;
    c->engram_vocab_size = ENGRAM_BENCH_VOCAB, c->engram_compressed_vocab = 99092, c->engram_pad_id = 2;
    int64_t primes[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    if (c->n_engram && engram_primes(c, primes)) die("engram layout");
    for (int e = 0; e < c->n_engram; e++)
        for (int k = 0; k < 3 * 8; k++) c->engram_rows[e] += primes[e][k];
    c->bos_token_id = 0, c->eos_token_id = 1, c->pad_token_id = 2, c->image_token_id = -1;
    c->quantized = true, c->quant_block_rows = c->quant_block_cols = 32;
    char err[256];
    if (model_config_schedule(c, err, sizeof err)) die("%s", err);
}

static uint64_t seed_counter = 1;

static bk_weight_t *W(backend_t *bk, wq_kind_t kind, int64_t rows, int64_t cols) {
    return backend_cuda_random_weight(bk, kind, rows, cols, sqrtf(3.0f / (float)cols), false, seed_counter++);
}

static bk_tensor_t V(backend_t *bk, int64_t n, float lo, float hi) {
    bk_tensor_t t = bk->alloc(bk, BK_F32, 1, n);
    backend_cuda_fill(bk, t, lo, hi, seed_counter++);
    return t;
}

static void random_model(backend_t *bk, int N, model_t *m) {
    memset(m, 0, sizeof *m);
    flash_config(N, &m->cfg);
    const model_config_t *c = &m->cfg;
    m->bk = bk;
    model_pages_new(m);
    snprintf(m->dir, sizeof m->dir, "(random weights)");
    int64_t D = c->hidden_size, hd = c->head_dim, H = c->n_heads, ql = c->q_lora_rank, G = c->o_groups, R = c->o_lora_rank;
    int64_t nm = (2 + c->hc_mult) * c->hc_mult, E = c->n_routed_experts, I = c->moe_inter;
    m->layers = xcalloc((size_t)N, sizeof *m->layers);
    for (int L = 0; L < N; L++) {
        const layer_sched_t *s = &c->layers[L];
        model_layer_t *l = &m->layers[L];
        l->hc_attn_fn = W(bk, WQ_F32, nm, c->hc_mult * D), l->hc_ffn_fn = W(bk, WQ_F32, nm, c->hc_mult * D);
        l->hc_attn_base = V(bk, nm, -0.5f, 0.5f), l->hc_ffn_base = V(bk, nm, -0.5f, 0.5f);
        l->hc_attn_scale = V(bk, 3, 0.5f, 1.5f), l->hc_ffn_scale = V(bk, 3, 0.5f, 1.5f);
        l->attn_norm = V(bk, D, 0.9f, 1.1f), l->ffn_norm = V(bk, D, 0.9f, 1.1f);
        l->attn.wq_a = W(bk, WQ_FP8, ql, D), l->attn.wq_b = W(bk, WQ_FP8, H * hd, ql), l->attn.wkv = W(bk, WQ_FP8, hd, D);
        l->attn.wo_a = W(bk, WQ_FP8, G * R, H * hd / G), l->attn.wo_b = W(bk, WQ_FP8, D, G * R);
        l->attn.q_norm = V(bk, ql, 0.9f, 1.1f), l->attn.kv_norm = V(bk, hd, 0.9f, 1.1f), l->attn.sink = V(bk, H, -1, 1);
        if (s->has_compressor) {
            l->attn.cmp_wkv = W(bk, WQ_BF16, hd, D), l->attn.cmp_norm = V(bk, hd, 0.9f, 1.1f);
            if (s->compressor_gate) l->attn.cmp_wgate = W(bk, WQ_BF16, hd, D);
        }
        if (s->has_indexer) {
            l->attn.idx_wq_b = W(bk, WQ_FP8, c->index_n_heads * c->index_head_dim, ql);
            l->attn.idx_wproj = W(bk, WQ_BF16, c->index_n_heads, D);
        }
        if (s->indexer_keys) l->attn.idx_wk = W(bk, WQ_BF16, c->index_head_dim, hd), l->attn.idx_k_norm = V(bk, c->index_head_dim, 0.9f, 1.1f);
        l->ffn.gate = W(bk, WQ_BF16, E, D), l->ffn.bias = V(bk, E, -0.1f, 0.1f);
        l->ffn.experts = xcalloc((size_t)E, sizeof *l->ffn.experts);
        for (int e = 0; e < E; e++)
            l->ffn.experts[e] = (bk_expert_t){W(bk, WQ_FP4, I, D), W(bk, WQ_FP4, D, I), W(bk, WQ_FP4, I, D)};
        l->ffn.shared = (bk_expert_t){W(bk, WQ_FP8, I, D), W(bk, WQ_FP8, D, I), W(bk, WQ_FP8, I, D)};
        if (s->engram >= 0) {
            int64_t ed = c->engram_head_dim, cols = 3 * c->engram_n_heads * ed;
            l->engram.table = backend_cuda_random_weight(bk, WQ_FP8, c->engram_rows[s->engram], ed, 1.0f, true, seed_counter++);
            l->engram.wkv = W(bk, WQ_FP8, D * (c->hc_mult + 1), cols);
            l->engram.qk = bk->alloc(bk, BK_F32, c->hc_mult, D);
            backend_cuda_fill(bk, l->engram.qk, 0.5f, 1.5f, seed_counter++);
        }
    }
    m->embed = backend_cuda_random_weight(bk, WQ_BF16, c->vocab_size, D, 1.0f, false, seed_counter++);
    m->head = W(bk, WQ_BF16, c->vocab_size, D);
    m->norm = V(bk, D, 0.9f, 1.1f);
    for (int t = 0; t < 2; t++) {
        float f[4096];
        rope_inv_freq(c, (rope_table_t)t, f);
        m->inv_freq[t] = bk->alloc(bk, BK_F32, 1, c->rope_dim / 2);
        bk->upload(bk, m->inv_freq[t], f);
    }
    if (c->n_engram) {
        uint32_t *map = xmalloc((size_t)c->vocab_size * 4);
        for (int64_t t = 0; t < c->vocab_size; t++) map[t] = (uint32_t)(t % c->engram_compressed_vocab);
        char err[256];
        if (engram_hash_init(&m->engram, c, map, err, sizeof err)) die("%s", err);
    }
    backend_cuda_sync(bk);
}

/* Random rows in a paged store, page by page; fake-quantized as the model stores them when
 * `qat` is a QAT kind (indexer keys: FP4 values whose products the tensor cores take exactly). */
static void fill_paged(backend_t *bk, bk_paged_t p, int qat, int block) {
    bk_tensor_t v;
    for (int64_t r = 0; r < p.rows; r += v.rows) {
        bk_paged_run(p, r, p.rows - r, &v);
        backend_cuda_fill(bk, v, -1, 1, seed_counter++);
        if (qat >= 0) bk->qat(bk, v, (qat_kind_t)qat, block);
    }
}

/* A sequence state at position ctx with random contents (windows, pools, keys, history). */
static seqstate_t *synth_state(const model_t *m, int64_t ctx, int64_t room) {
    const model_config_t *c = &m->cfg;
    backend_t *bk = m->bk;
    seqstate_t *st = seqstate_new(m, true);
    st->T = ctx;
    for (int s = 0; s < MC_MAX_NGRAM; s++) st->hist[s] = (int32_t)(seed_counter++ * 7919 % (uint64_t)c->engram_compressed_vocab);
    for (int L = 0; L < c->n_layers; L++) {
        const layer_sched_t *s = &c->layers[L];
        seq_layer_t *l = &st->layers[L];
        backend_cuda_fill(bk, l->ring, -1, 1, seed_counter++);
        l->win_lo = 0, l->win_end = ctx;
        if (!s->has_compressor) continue;
        int64_t n = ctx / s->ratio;
        seqstate_reserve(st, L, n + room);
        seqstate_sync(st, L);
        fill_paged(bk, seqstate_pool(st, L, n), -1, 0);
        if (s->indexer_keys) fill_paged(bk, seqstate_keys(st, L, n), QAT_FP4_UE8M0, 32); /* as compress() leaves them */
        l->n_entries = n;
        l->n_pend = (int)(ctx % s->ratio);
        if (l->n_pend) {
            backend_cuda_fill(bk, bk_rows(l->pend_z, 0, l->n_pend), -1, 1, seed_counter++);
            backend_cuda_fill(bk, bk_rows(l->pend_s, 0, l->n_pend), -1, 1, seed_counter++);
        }
    }
    return st;
}

/* ---- bytes and FLOPs -------------------------------------------------------------------------- */
static double fp8_bytes(double rows, double cols) { return rows * cols * (1 + 1.0 / 1024); }
static double fp4_bytes(double rows, double cols) { return rows * cols * (0.5 + 1.0 / 32); }

/* Weight bytes of layer L that every token reads (all but the routed experts), and one routed
 * expert's bytes. */
static double layer_fixed_bytes(const model_config_t *c, int L) {
    const layer_sched_t *s = &c->layers[L];
    double D = c->hidden_size, hd = c->head_dim, H = c->n_heads, ql = c->q_lora_rank, GR = c->o_groups * c->o_lora_rank;
    double b = fp8_bytes(ql, D) + fp8_bytes(H * hd, ql) + fp8_bytes(hd, D) + fp8_bytes(GR, H * hd / c->o_groups) + fp8_bytes(D, GR);
    b += 2 * (2 + c->hc_mult) * c->hc_mult * c->hc_mult * D * 4; /* mHC fn, F32 */
    b += (2 * D + ql + hd) * 2 + c->n_routed_experts * (2 * D + 4);
    b += 3 * fp8_bytes(c->moe_inter, D);                          /* shared expert */
    if (s->has_compressor) b += hd * D * 2 * (s->compressor_gate ? 2 : 1);
    if (s->has_indexer) b += fp8_bytes((double)c->index_n_heads * c->index_head_dim, ql) + c->index_n_heads * D * 2;
    if (s->indexer_keys) b += (double)c->index_head_dim * hd * 2;
    if (s->engram >= 0) b += fp8_bytes(D * (c->hc_mult + 1), 3.0 * c->engram_n_heads * c->engram_head_dim);
    return b;
}
static double expert_bytes(const model_config_t *c) { return 3 * fp4_bytes(c->moe_inter, c->hidden_size); }

/* Distinct experts B tokens touch, expected under uniform routing. */
static double touched(const model_config_t *c, int B) {
    double E = c->n_routed_experts;
    return E * (1 - pow(1 - c->n_experts_per_tok / E, B));
}

/* State bytes one decode token reads and writes at layer L with context ctx: window rows,
 * selected pool entries, all visible indexer keys at index sources, the appended rows. row_*:
 * bytes per window row, pool entry and key (packed: 528/288/68; fp32 as held: 2048/2048/512). */
static double layer_state_bytes(const model_config_t *c, int L, double ctx, double row_w, double row_p, double row_k) {
    const layer_sched_t *s = &c->layers[L];
    double b = fmin(ctx + 1, c->sliding_window) * row_w + row_w;
    if (s->ratio) {
        double vis = (ctx + 1) / c->layers[s->kv_source].ratio;
        b += fmin(vis, c->index_topk) * row_p;
        if (s->has_indexer) b += vis * row_k;
        if (s->has_compressor) b += (row_p + row_k) / s->ratio;
    }
    if (s->engram >= 0) b += 3.0 * c->engram_n_heads * (c->engram_head_dim + c->engram_head_dim / 32);
    return b;
}

/* Multiply-adds x2 of one token at layer L with ctx tokens before it. */
static double layer_flops(const model_config_t *c, int L, double ctx) {
    const layer_sched_t *s = &c->layers[L];
    double D = c->hidden_size, hd = c->head_dim, H = c->n_heads, ql = c->q_lora_rank, GR = c->o_groups * c->o_lora_rank, I = c->moe_inter;
    double p = ql * D + H * hd * ql + hd * D + GR * H * hd / c->o_groups + D * GR;
    p += 2.0 * (2 + c->hc_mult) * c->hc_mult * c->hc_mult * D + c->n_routed_experts * D;
    p += (c->n_experts_per_tok + 1) * 3 * I * D;
    if (s->has_compressor) p += hd * D * (s->compressor_gate ? 2 : 1);
    if (s->has_indexer) p += (double)c->index_n_heads * c->index_head_dim * ql + c->index_n_heads * D;
    if (s->indexer_keys) p += (double)c->index_head_dim * hd / s->ratio;
    if (s->engram >= 0) p += D * (c->hc_mult + 1) * 3.0 * c->engram_n_heads * c->engram_head_dim;
    double keys = fmin(ctx + 1, c->sliding_window);
    if (s->ratio) {
        double vis = (ctx + 1) / c->layers[s->kv_source].ratio;
        keys += fmin(vis, c->index_topk);
        if (s->has_indexer) p += vis * c->index_n_heads * c->index_head_dim;
    }
    p += 2 * H * hd * keys; /* logits and weighted sum */
    return 2 * p;
}

static double head_bytes(const model_config_t *c) { return (double)c->vocab_size * c->hidden_size * 2; }

/* ---- measurements ------------------------------------------------------------------------------ */
typedef struct {
    cuda_ceilings_t ceil;
    int layers;
} bench_t;

static double now_ms(void) { return (double)now_ns() / 1e6; }

static void decode_point(bench_t *b, const model_t *m, int B, int64_t ctx, int steps, bool profile) {
    const model_config_t *c = &m->cfg;
    backend_t *bk = m->bk;
    char err[256];
    seqstate_t **sts = xmalloc((size_t)B * sizeof *sts);
    for (int i = 0; i < B; i++) sts[i] = synth_state(m, ctx, 3 * steps + 16);
    uint32_t *ids = xmalloc((size_t)B * 4);
    float *logits = xmalloc((size_t)B * (size_t)c->vocab_size * 4);
    for (int i = 0; i < B; i++) ids[i] = (uint32_t)((i * 7919 + 13) % c->vocab_size);
    /* greedy picks on the device, as di-decode's steps: every op launched on its own, then
     * recorded as graph segments */
    sampler_params_t greedy = {.temperature = 0, .top_p = 1};
    uint32_t *tok = xmalloc((size_t)B * 4);
    bk_pick_t *picks = xcalloc((size_t)B, sizeof *picks);
    for (int i = 0; i < B; i++) picks[i] = (bk_pick_t){&greedy, ctx + i, NULL, &tok[i], NULL};
    sampler_t *scratch = sampler_new(c->vocab_size);
    double launched[2];
    cuda_graph_counts_t n0, n1, n2;
    for (int on = 0; on < 2; on++) {
        backend_cuda_graphs(bk, on);
        /* warm-up: tables, caches, and the segments of the steps' variants (the compressors' ratios) */
        for (int s = 0; s < (on ? 8 : 1); s++)
            if (forward_step_batch_pick(sts, ids, B, picks, scratch, err, sizeof err)) die("%s", err);
        n0 = backend_cuda_graph_counts(bk);
        double t0 = now_ms();
        for (int s = 0; s < steps; s++)
            if (forward_step_batch_pick(sts, ids, B, picks, scratch, err, sizeof err)) die("%s", err);
        launched[on] = (now_ms() - t0) / steps;
    }
    sampler_free(scratch);
    free(picks), free(tok);
    double direct = launched[0], segments = launched[1];
    n1 = backend_cuda_graph_counts(bk);
    double graph = 0;
    for (int s = 0; s <= steps; s++) { /* the first capture instantiates: not timed */
        double g0 = now_ms();
        backend_cuda_graph_begin(bk);
        if (forward_step_batch(sts, ids, B, logits, err, sizeof err)) die("%s", err);
        backend_cuda_graph_end(bk);
        if (s) graph += now_ms() - g0;
    }
    graph /= steps;
    n2 = backend_cuda_graph_counts(bk);
    double replay = backend_cuda_graph_replay(bk, 20);
    double fixed = 0, packed = 0, fp32 = 0, flops = 0;
    for (int L = 0; L < c->n_layers; L++) {
        fixed += layer_fixed_bytes(c, L);
        packed += B * layer_state_bytes(c, L, (double)ctx, 528, 288, 68);
        fp32 += B * layer_state_bytes(c, L, (double)ctx, 2048, 2048, 512);
        flops += B * layer_flops(c, L, (double)ctx);
    }
    double weights = fixed + touched(c, B) * c->n_layers * expert_bytes(c) + head_bytes(c) + B * c->hidden_size * 2.0;
    double floor_ms = (weights + packed) / b->ceil.copy_bytes_s * 1e3, floor_held = (weights + fp32) / b->ceil.copy_bytes_s * 1e3;
    /* the same efficiency on the 40-layer model: its floor times the measured ratio */
    model_config_t full;
    flash_config(40, &full);
    double wf = head_bytes(&full) + B * full.hidden_size * 2.0, sf = 0;
    for (int L = 0; L < 40; L++) wf += layer_fixed_bytes(&full, L) + touched(&full, B) * expert_bytes(&full), sf += B * layer_state_bytes(&full, L, (double)ctx, 528, 288, 68);
    double floor40 = (wf + sf) / b->ceil.copy_bytes_s * 1e3;
    printf("| %4d | %6lld | %8.3f | %8.3f | %8.3f | %8.3f | %7.2f GB + %6.2f GB | %7.3f | %5.3fx | %5.3fx | %8.1f | %4.1f |\n", B,
           (long long)ctx, direct, segments, graph, replay, weights / 1e9, packed / 1e9, floor_ms, segments / floor_ms,
           replay / floor_ms, floor40 * segments / floor_ms, flops / (replay * 1e-3) / 1e12);
    printf("       (fp32 state as held: %.2f GB, floor %.3f ms; 40-layer floor %.2f ms; a step in segments: %.1f launches "
           "reused, %.1f captured, %.1f nodes patched; as one graph: %.1f nodes patched, %ld captures in %d steps)\n",
           fp32 / 1e9, floor_held, floor40, (double)(n1.reused - n0.reused) / steps, (double)(n1.captured - n0.captured) / steps,
           (double)(n1.patched_nodes - n0.patched_nodes) / steps, (double)(n2.patched_nodes - n1.patched_nodes) / (steps + 1),
           n2.captured - n1.captured, steps + 1);
    if (profile) {
        backend_cuda_profile(bk, true);
        for (int s = 0; s < 2; s++)
            if (forward_step_batch(sts, ids, B, logits, err, sizeof err)) die("%s", err);
        printf("\nper-op time of one decode step, batch %d, context %lld (eager, events around each op):\n", B, (long long)ctx);
        backend_cuda_profile_report(bk, stdout, 2);
        backend_cuda_profile(bk, false);
        printf("\n");
    }
    for (int i = 0; i < B; i++) seqstate_free(sts[i]);
    free(sts), free(ids), free(logits);
}

static void prefill_point(bench_t *b, const model_t *m, int64_t len, int n, bool profile, const char *prec) {
    const model_config_t *c = &m->cfg;
    char err[256];
    uint32_t *ids = xmalloc((size_t)(len * n) * 4);
    for (int64_t i = 0; i < len * n; i++) ids[i] = (uint32_t)((i * 2654435761u) % (uint64_t)c->vocab_size);
    float *logits = xmalloc((size_t)n * (size_t)c->vocab_size * 4);
    double best = 1e30;
    for (int rep = 0; rep < 2 + profile; rep++) {
        seqstate_t **sts = xmalloc((size_t)n * sizeof *sts);
        fwd_seq_t *seqs = xcalloc((size_t)n, sizeof *seqs);
        for (int i = 0; i < n; i++) {
            sts[i] = seqstate_new(m, true);
            seqs[i] = (fwd_seq_t){sts[i], ids + i * len, len, -1, FWD_LOGITS_LAST, logits + (size_t)i * (size_t)c->vocab_size, 0, NULL};
        }
        if (rep == 2) backend_cuda_profile(m->bk, true);
        backend_cuda_sync(m->bk);
        double t0 = now_ms();
        if (forward_batch(seqs, n, err, sizeof err)) die("%s", err);
        double ms = now_ms() - t0;
        if (rep == 1) best = ms; /* the first pass warms the allocator */
        if (rep == 2) {
            printf("\nper-op time of the prefill %lld x %d (events around each op):\n", (long long)len, n);
            backend_cuda_profile_report(m->bk, stdout, 1);
            backend_cuda_profile(m->bk, false);
        }
        for (int i = 0; i < n; i++) seqstate_free(sts[i]);
        free(sts), free(seqs);
    }
    double flops = 0;
    for (int L = 0; L < c->n_layers; L++)
        for (int64_t t = 0; t < len; t++) flops += n * layer_flops(c, L, (double)t);
    flops += 2.0 * n * c->vocab_size * c->hidden_size;
    double rate = flops / (best * 1e-3);
    printf("| %5lld x %d | %-6s | %9.1f | %9.0f | %7.1f | %6.1f | %5.1f%% | %5.1f%% |\n", (long long)len, n, prec, best,
           len * n / (best * 1e-3), flops / 1e12, rate / 1e12, 100 * rate / b->ceil.fp8_flops, 100 * rate / b->ceil.bf16_flops);
    free(ids), free(logits);
}

/* ---- sampling ----------------------------------------------------------------------------------- */
/* The pick op for B rows of one kind (the best of 5 after a warm-up; the tokens come back to the
 * host inside the time), and the host sampler on the same rows. Logits uniform in [0, 16): a
 * flat distribution, the worst case for top-p (it keeps most of the vocabulary); peaked: 16
 * tokens of each row 40 higher, so that the nucleus is a few tokens, as a language model's
 * usually is. */
static void sample_point(backend_t *bk, int B, const char *kind, sampler_params_t sp, bool peaked) {
    int64_t Vc = 129280;
    bk_tensor_t l = V(bk, (int64_t)B * Vc, 0.0f, 16.0f);
    l.rows = B, l.cols = Vc, l.ld = Vc;
    if (peaked) {
        float *h = xmalloc((size_t)B * (size_t)Vc * sizeof *h);
        bk->download(bk, h, l);
        uint64_t x = 12345;
        for (int i = 0; i < B; i++)
            for (int j = 0; j < 16; j++) x = x * 6364136223846793005ull + 1442695040888963407ull, h[(size_t)i * Vc + (x >> 33) % Vc] += 40.0f;
        bk->upload(bk, l, h);
        free(h);
    }
    bk_pick_t *rows = xcalloc((size_t)B, sizeof *rows);
    uint32_t *tok = xcalloc((size_t)B, sizeof *tok);
    frame_logprob_t *lp = xcalloc((size_t)B, sizeof *lp);
    for (int i = 0; i < B; i++) rows[i] = (bk_pick_t){&sp, 1000 + i, NULL, &tok[i], &lp[i]};
    sampler_t *scratch = sampler_new(Vc);
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = now_ms();
        bk->pick(bk, l, rows, B, scratch);
        if (r > 0 && now_ms() - t0 < best) best = now_ms() - t0;
    }
    float *host = xmalloc((size_t)Vc * sizeof *host);
    double h0 = now_ms();
    for (int i = 0; i < B; i++) {
        bk->download(bk, host, bk_rows(l, i, 1));
        sampler_pick(scratch, &sp, host, 1000 + i, NULL, &lp[i]);
    }
    double th = now_ms() - h0;
    printf("| %d | %s | %.3f | %.1f | %.3f | %.1fx |\n", B, kind, best, 1e3 * best / B, th, th / best);
    free(host), free(rows), free(tok), free(lp);
    sampler_free(scratch);
    bk->release(bk, &l);
}

static void sample_points(backend_t *bk, const int64_t *batches, int nb) {
    printf("\nsampling (the pick op on the device, 129,280 logits a row, tokens back on the host; host = download + "
           "sampler.c on one core, the same rows):\n");
    printf("| batch | kind | device ms | us per row | host ms | host / device |\n|---|---|---|---|---|---|\n");
    static const struct {
        const char *name;
        sampler_params_t sp;
        bool peaked;
    } kinds[] = {
        {"greedy", {.temperature = 0, .top_p = 1}, false},
        {"temperature 1", {.temperature = 1, .top_p = 1, .seed = 7}, false},
        {"top-k 50, temperature 0.7", {.temperature = 0.7, .top_k = 50, .top_p = 1, .seed = 7}, false},
        {"top-p 0.95, temperature 0.7", {.temperature = 0.7, .top_p = 0.95, .seed = 7}, false},
        {"top-p 0.95, temperature 0.7, peaked", {.temperature = 0.7, .top_p = 0.95, .seed = 7}, true},
        {"greedy + 5 top log-probabilities", {.temperature = 0, .top_p = 1, .logprobs = true, .top_logprobs = 5}, false},
    };
    for (int i = 0; i < nb; i++)
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
            sample_point(bk, (int)batches[i], kinds[k].name, kinds[k].sp, kinds[k].peaked);
}

static void parse_list(const char *s, int64_t *v, int *n, int max) {
    *n = 0;
    char *copy = xstrdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && *n < max; t = strtok_r(NULL, ",", &save))
        if (!parse_i64(t, 1, 1 << 30, &v[(*n)++])) die("bad number '%s'", t);
    free(copy);
}

int main(int argc, char **argv) {
    int64_t layers = 8, steps = 3, gemm = 8192, batches[8] = {1, 8, 64, 256}, contexts[8] = {4000, 32000};
    int nb = 4, nc = 2;
    bool random_weights = false, decode = true, prefill = true, sample = true;
    const char *prefills = "8192x1,2048x8";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--random-weights")) random_weights = true;
        else if (!strcmp(a, "--no-decode")) decode = false;
        else if (!strcmp(a, "--no-prefill")) prefill = false;
        else if (!strcmp(a, "--no-sample")) sample = false;
        else if (!strcmp(a, "--layers") && v && parse_i64(v, 4, 40, &layers)) i++;
        else if (!strcmp(a, "--steps") && v && parse_i64(v, 1, 1000, &steps)) i++;
        else if (!strcmp(a, "--gemm") && v && parse_i64(v, 256, 32768, &gemm)) i++;
        else if (!strcmp(a, "--batches") && v) parse_list(v, batches, &nb, 8), i++;
        else if (!strcmp(a, "--contexts") && v) parse_list(v, contexts, &nc, 8), i++;
        else if (!strcmp(a, "--prefill") && v) prefills = argv[++i];
        else die("unknown or bad argument %s (see the comment at the top of bench/cuda_bench.c)", a);
    }
    if (!random_weights) die("give --random-weights: the benchmark synthesizes V4.1-Flash weights on the device (no checkpoint is read)");
    char err[256];
    backend_t *bk = backend_cuda_create(0, err, sizeof err);
    if (!bk) {
        printf("cuda_bench: %s; nothing measured\n", err);
        return 0;
    }
    bench_t b = {.layers = (int)layers};
    backend_cuda_ceilings(bk, (int)gemm, &b.ceil);
    printf("device: %s, %d SMs, %.1f GiB\n", b.ceil.name, b.ceil.sms, b.ceil.mem_bytes / (1 << 30));
    printf("ceilings (median of 20 after warm-up, random data):\n");
    printf("  device-to-device copy: %.0f GB/s (bytes read + written)\n", b.ceil.copy_bytes_s / 1e9);
    printf("  cuBLASLt bf16 GEMM %d^3: %.0f TFLOP/s\n", b.ceil.gemm_size, b.ceil.bf16_flops / 1e12);
    printf("  cuBLASLt FP8 e4m3 GEMM %d^3 (per-tensor scales): %.0f TFLOP/s\n\n", b.ceil.gemm_size, b.ceil.fp8_flops / 1e12);

    model_t m;
    double t0 = now_ms();
    random_model(bk, (int)layers, &m);
    size_t live, cached, weights;
    backend_cuda_memory(bk, &live, &cached, &weights);
    printf("model: DeepSeek-V4.1-Flash shapes, RANDOM WEIGHTS (benchmark only), %d of 40 layers:", (int)layers);
    for (int L = 0; L < m.cfg.n_layers; L++)
        printf(" %d:%s%s%s", L, attn_mode_name(m.cfg.layers[L].mode), m.cfg.layers[L].ratio ? (m.cfg.layers[L].ratio == 2 ? "/r2" : "/r1") : "",
               m.cfg.layers[L].engram >= 0 ? "+Engram" : "");
    printf("\n  %.1f GB of weights on the device, synthesized in %.1f s; Engram tables in page-locked host memory "
           "(%lld rows each, bench-sized)\n\n", weights / 1e9, (now_ms() - t0) / 1e3, m.cfg.n_engram ? (long long)m.cfg.engram_rows[0] : 0LL);
    if (decode) {
        printf("decode (QAT on, default precision bf16x3; ms per step; direct = every op launched by the host, segments = "
               "recorded and launched as graph segments (what di-decode does), both with greedy picks on the device; graph = "
               "the step as one graph with its logits downloaded, recorded + patched + run, replay = that graph relaunched: "
               "device time alone; floor = bytes / copy bandwidth, weights "
               "touched under uniform routing + state in the model's packed formats):\n");
        printf("| batch | context | direct ms | segments ms | graph ms | replay ms | bytes (weights + state) | floor ms | "
               "segments/floor | replay/floor | 40-layer ms (projected) | TFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int j = 0; j < nc; j++)
            for (int i = 0; i < nb; i++) decode_point(&b, &m, (int)batches[i], contexts[j], (int)steps, false);
        decode_point(&b, &m, 1, contexts[0], (int)steps, true);
        decode_point(&b, &m, (int)batches[nb - 1], contexts[0], 1, true);
    }
    if (prefill) {
        printf("\nprefill (exact, QAT on, one forward over all prompts; TFLOP/s counts the model's multiply-adds x2 incl. "
               "attention and indexer scoring):\n");
        printf("| prompts | tensor-core activations | ms | tokens/s | TFLOP | TFLOP/s | of FP8 | of bf16 |\n"
               "|---|---|---|---|---|---|---|---|\n");
        static const struct {
            cuda_precision_t p;
            const char *name;
        } precs[] = {{CUDA_BF16X3, "bf16x3"}, {CUDA_BF16, "bf16"}, {CUDA_FP8, "fp8"}};
        for (size_t prec = 0; prec < DI_ARRAY_LEN(precs); prec++) {
            backend_cuda_precision(bk, precs[prec].p);
            char *copy = xstrdup(prefills), *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int64_t len, n;
                char *x = strchr(t, 'x');
                if (!x) die("--prefill wants LENxN items");
                *x = 0;
                if (!parse_i64(t, 1, 1 << 20, &len) || !parse_i64(x + 1, 1, 256, &n)) die("bad --prefill item");
                prefill_point(&b, &m, len, (int)n, false, precs[prec].name);
            }
            free(copy);
        }
        for (size_t prec = 0; prec < DI_ARRAY_LEN(precs); prec++) { /* where the time goes, in each precision */
            backend_cuda_precision(bk, precs[prec].p);
            prefill_point(&b, &m, 8192, 1, true, precs[prec].name);
        }
        backend_cuda_precision(bk, CUDA_BF16X3);
    }
    model_close(&m);
    if (sample) sample_points(bk, batches, nb);
    bk->destroy(bk);
    return 0;
}
