#!/usr/bin/env python3
"""Writes the golden logits in tests/data/golden/ (see tests/golden/README.md).

For each tiny configuration: generate the checkpoint with di-mkmodel (fp8 and bf16 variants),
decode it here with an independent numpy decoder (FP8 E4M3 / FP4 E2M1 / UE8M0), check that the
two variants hold the same weights, load them into transformers' DeepseekV41ForCausalLM (fp32,
eager, CPU, always with a DynamicCache: MODEL_V41 P24) and into the fp64 reference
shared/design/ref/v41_spec_check.py, and write HF's logits for fixed token sequences:
  QAT off  both sequences, plus per-layer stream outputs for the first positions;
  QAT on   the long sequence, HF fp32 and the fp64 reference, with the positions where the two
           differ by more than 1e-4 (FP8/FP4 rounding flips, MODEL_V41 P23).
Test-only: needs torch, numpy, sympy and a transformers with deepseek_v41, or --hf-src: a
folder whose deepseek_v41/ holds the two HF files (see hf_loader.py and README.md).
"""
import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIGS = [  # name, preset, vocab, seed, long length, medium length, sequence seed
    ("tiny-a", "a", 512, 7, 301, 97, 11),
    ("tiny-b", "b", 320, 9, 320, 97, 12),
]
HIDDEN_POSITIONS = 16
FLIP_BAR = 1e-4


# ---------------------------------------------------------------- safetensors, decoded here
def e4m3_table():
    v = np.zeros(256, np.float64)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        x = np.nan if (e == 15 and m == 7) else (m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
        v[b] = -x if b & 0x80 else x
    return v


E4M3 = e4m3_table()
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float64)
DT = {"F32": np.float32, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "I8": np.uint8, "U8": np.uint8}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, en = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + en], DT[e["dtype"]])
        out[name] = (e["dtype"], e["shape"], a)
    return out


def dequantize(tensors, block):
    """name -> float64 array of every weight (scales folded in), the official names."""
    W = {}
    for name, (dt, shape, a) in tensors.items():
        if name.endswith(".scale"):
            continue
        if dt == "F32":
            W[name] = a.astype(np.float64).reshape(shape)
        elif dt == "BF16":
            W[name] = (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(shape)
        else:
            sdt, sshape, s = tensors[name[:-len("weight")] + "scale"]
            assert sdt == "F8_E8M0", name
            scale = np.ldexp(1.0, s.astype(np.int64) - 127).reshape(sshape)
            if dt == "I8":  # FP4: even column in the low nibble
                packed = a.reshape(shape)
                codes = np.stack([packed & 15, packed >> 4], -1).reshape(shape[0], -1)
                vals, br, bc = E2M1[codes], 1, 32
            else:
                vals = E4M3[a].reshape(shape)
                br, bc = (1, 32) if name.endswith("engram.embed.weight") else block
            rows, cols = vals.shape
            s_full = np.repeat(np.repeat(scale, br, 0), bc, 1)[:rows, :cols]
            W[name] = vals * s_full
    return W


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ---------------------------------------------------------------- HF and the reference
def load_hf(hf_src):
    try:
        from transformers.models.deepseek_v41 import configuration_deepseek_v41 as cm
        from transformers.models.deepseek_v41 import modeling_deepseek_v41 as mm
        return cm, mm, "native"
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hf_loader

        cm, mm, shims = hf_loader.load(hf_src)
        return cm, mm, f"local copy of the HF files (tests/golden/hf_loader.py); shims: {shims}"


def load_ref(path):
    spec = importlib.util.spec_from_file_location("v41_spec_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def hf_name(n):
    return "lm_head.weight" if n == "head.weight" else "model." + n


def build_hf(cm, mm, text, W, token_map):
    cfg = dict(text)
    cfg.pop("model_type", None)
    cfg["engram_pad_id"] = cfg.pop("engram_pad_token_id")
    model = mm.DeepseekV41ForCausalLM(cm.DeepseekV41Config(text_config=cm.DeepseekV41TextConfig(**cfg)))
    mm.build_compressed_token_map = lambda tok: (list(token_map), len(set(token_map)))
    model.model.bind_tokenizer(None)
    sd = {hf_name(n): torch.from_numpy(v).float() for n, v in W.items()}
    for L in text["engram_layer_ids"]:  # HF's float path ignores the table scales: ones
        e = sd[f"model.layers.{L}.engram.embed.weight"]
        sd[f"model.layers.{L}.engram.embed.scale"] = torch.ones(e.shape[0], e.shape[1] // 32)
    model.load_state_dict(sd, strict=True)
    return model.float().eval()


class Qat:
    """Switches HF's QAT quantizers off (identity) or back on."""

    def __init__(self, mm):
        self.mm, self.q8, self.q4 = mm, mm._fake_quant_fp8_block, mm._fake_quant_fp4_block

    def set(self, on):
        self.mm._fake_quant_fp8_block = self.q8 if on else (lambda x, block_size=32: x)
        self.mm._fake_quant_fp4_block = self.q4 if on else (lambda x, block_size, e4m3_scales=False: x)


def hf_logits(model, ids, chunks=None):
    from transformers.cache_utils import DynamicCache

    model.model.engram_hash_state.history = None
    cache = DynamicCache(config=model.config)
    x = torch.tensor([ids])
    out, p = [], 0
    with torch.no_grad():
        for n in chunks or [len(ids)]:
            out.append(model(x[:, p:p + n], past_key_values=cache, use_cache=True).logits[0])
            p += n
    return torch.cat(out).double().numpy()


def layer_outputs(model, ids, positions):
    """Each block's output streams [layers, positions, hc, D] (one prefill, QAT as set)."""
    got = []
    hooks = [layer.register_forward_hook(lambda m, a, o: got.append(o[0][0, :positions].detach().float().numpy()))
             for layer in model.model.layers]
    try:
        hf_logits(model, ids)
    finally:
        for h in hooks:
            h.remove()
    return np.stack(got)


def rel_l2(a, b):
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


def stats(lg):
    p = torch.softmax(torch.from_numpy(lg), -1).numpy()
    ent = -(p * np.log(np.maximum(p, 1e-300))).sum(-1)
    return dict(logit_std=float(lg.std()), logit_absmax=float(np.abs(lg).max()), mean_top1_prob=float(p.max(-1).mean()),
                mean_entropy=float(ent.mean()), max_entropy=float(np.log(lg.shape[-1])),
                distinct_argmax=int(len(set(lg.argmax(-1).tolist()))))


# ---------------------------------------------------------------- one configuration
def run_config(args, cm, mm, ref_mod, name, preset, vocab, seed, n_long, n_mid, seq_seed, out_dir):
    tmp = tempfile.mkdtemp(prefix="golden-")
    paths = {}
    for variant in ("fp8", "bf16"):
        d = os.path.join(tmp, variant)
        subprocess.run([args.mkmodel, "--out", d, "--preset", preset, "--vocab", str(vocab), "--seed", str(seed),
                        "--variant", variant], check=True)
        paths[variant] = d
    config = json.load(open(os.path.join(paths["fp8"], "config.json")))
    text = config["text_config"]
    block = tuple(config["quantization_config"]["weight_block_size"])
    W8 = dequantize(read_safetensors(os.path.join(paths["fp8"], "model.safetensors")), block)
    W16 = dequantize(read_safetensors(os.path.join(paths["bf16"], "model.safetensors")), block)
    assert W8.keys() == W16.keys()
    same = all(np.array_equal(W8[k], W16[k]) for k in W8)
    print(f"{name}: {len(W8)} weights, fp8 variant dequantized == bf16 variant: {same}")
    assert same, "the two variants must hold the same weights"
    token_map = np.fromfile(os.path.join(paths["fp8"], "engram_token_map.u32"), "<u4").astype(np.int64).tolist()

    model = build_hf(cm, mm, text, W8, token_map)
    qat = Qat(mm)
    rng = np.random.default_rng(seq_seed)
    seqs = {"long": rng.integers(0, vocab, n_long).tolist(),
            # small alphabet: repeated n-grams for the Engram hash, near-duplicate KV rows
            "repeat": rng.integers(0, 12, n_mid).tolist()}
    rcfg = dict(text, gate_temp=1.0)
    Wt = {k: torch.from_numpy(v) for k, v in W8.items()}
    hs = model.model.engram_hash_state
    engram = dict(primes=hs.primes.tolist(), offsets=hs.offsets.tolist(), multipliers=hs.multipliers.tolist(),
                  pad_compressed_id=int(hs.pad_id), compressed_vocab=len(set(token_map)))
    index = dict(config=name, mkmodel=dict(preset=preset, vocab=vocab, seed=seed), engram_layout=engram,
                 checkpoint_sha256={v: sha256(os.path.join(paths[v], "model.safetensors")) for v in paths},
                 token_map_sha256=sha256(os.path.join(paths["fp8"], "engram_token_map.u32")),
                 sequences=seqs, files={}, checks={})

    def save(key, arr, what):
        fn = f"{name}.{key}.f32"
        arr.astype("<f4").tofile(os.path.join(out_dir, fn))
        index["files"][key] = dict(file=fn, shape=list(arr.shape), dtype="float32 little-endian", what=what)

    # QAT off: HF goldens, cross-checked against the fp64 reference and against HF chunked
    qat.set(False)
    ref = ref_mod.RefV41(rcfg, Wt, token_map, qat=False)
    for sname, ids in seqs.items():
        hf = hf_logits(model, ids)
        ref_mod.EVENTS.clear()
        r = ref.run(ids, [len(ids)]).numpy()
        ties = sorted({p for k, _, p, _, _ in ref_mod.EVENTS if k.endswith("tie")})
        ch = hf_logits(model, ids, [37, 23, len(ids) - 60])
        save(f"qat_off.{sname}.logits", hf, f"HF fp32 logits, QAT off, prefill of sequences.{sname}")
        index["checks"][f"qat_off.{sname}"] = dict(
            max_rel_l2_hf_vs_ref64=float(rel_l2(hf, r).max()), worst_pos=int(rel_l2(hf, r).argmax()),
            argmax_agree=int((hf.argmax(-1) == r.argmax(-1)).sum()), positions=len(ids),
            max_rel_l2_hf_chunked_37_23_rest=float(rel_l2(ch, hf).max()), ref_topk_ties_at=ties, logit_stats=stats(hf))
        print(name, sname, "QAT off", index["checks"][f"qat_off.{sname}"])
    hs = layer_outputs(model, seqs["repeat"], HIDDEN_POSITIONS)
    save("qat_off.repeat.layer_out", hs, f"HF block outputs (streams) per layer for positions 0..{HIDDEN_POSITIONS - 1} "
         "of sequences.repeat, QAT off: [layer, position, hc, hidden]")

    # QAT on: HF fp32 and the fp64 reference; flips are where they part
    qat.set(True)
    ref = ref_mod.RefV41(rcfg, Wt, token_map, qat=True)
    ids = seqs["long"]
    hf = hf_logits(model, ids)
    ref_mod.EVENTS.clear()
    r = ref.run(ids, [len(ids)]).numpy()
    near = sorted({p for _, _, p, _, _ in ref_mod.EVENTS})
    d = rel_l2(hf, r)
    flips = [int(p) for p in np.nonzero(d > FLIP_BAR)[0]]
    model.double()
    hf64 = hf_logits(model, ids)
    model.float()
    save("qat_on.long.logits", hf, "HF fp32 logits, QAT on, prefill of sequences.long")
    save("qat_on.long.ref64", r, "fp64 reference (v41_spec_check.py) logits, QAT on, prefill of sequences.long, as float32")
    index["checks"]["qat_on.long"] = dict(
        max_rel_l2_hf_vs_ref64=float(d.max()), positions_over_1e_4=flips,
        first_flip=flips[0] if flips else None, argmax_agree=int((hf.argmax(-1) == r.argmax(-1)).sum()),
        positions=len(ids), max_rel_l2_hf_fp64_params_vs_ref64=float(rel_l2(hf64, r).max()),
        ref_near_rounding_decisions_at=near[:64], logit_stats=stats(hf))
    print(name, "QAT on", {k: v for k, v in index["checks"]["qat_on.long"].items() if k != "ref_near_rounding_decisions_at"})
    json.dump(dict(config), open(os.path.join(out_dir, f"{name}.config.json"), "w"), indent=1)
    return index


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkmodel", default=os.path.join(ROOT, "bin", "di-mkmodel"))
    ap.add_argument("--hf-src", default=os.environ.get("DI_HF_SRC", os.path.join(ROOT, "..", ".ref", "hf_v41")))
    ap.add_argument("--ref", default=os.path.join(ROOT, "..", "shared", "design", "ref", "v41_spec_check.py"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    import transformers

    cm, mm, how = load_hf(args.hf_src)
    ref_mod = load_ref(args.ref)
    os.makedirs(args.out, exist_ok=True)
    index = dict(generated_by="tests/golden/make_goldens.py", transformers=transformers.__version__,
                 torch=torch.__version__, numpy=np.__version__, hf_source=how,
                 hf_modeling="transformers commit 0a2080b4 models/deepseek_v41 (fp32, eager, CPU, DynamicCache)",
                 reference=os.path.relpath(os.path.abspath(args.ref), ROOT), configs=[])
    for c in CONFIGS:
        index["configs"].append(run_config(args, cm, mm, ref_mod, *c, args.out))
    json.dump(index, open(os.path.join(args.out, "index.json"), "w"), indent=1)
    print("wrote", os.path.join(args.out, "index.json"))


if __name__ == "__main__":
    main()
