#!/usr/bin/env python3
"""scripts/engram-token-map.py: the Engram compressed token map of the V4 tokenizer has 129280
entries and exactly 99092 distinct ids numbered in first-seen order (MODEL_V41 §5.2), the file
set-up wrote is that map, --expect refuses another count, and, when the HF deepseek_v41 files
are at hand (tests/golden/hf_loader.py), it equals transformers' build_compressed_token_map."""
import os
import subprocess
import sys
import tempfile

import numpy as np

from harness import DATA, ROOT, run_suite
from harness import TOKENIZER_JSON as TOK

SCRIPT = os.path.join(ROOT, "scripts", "engram-token-map.py")


def test_token_map(s):
    if not os.path.exists(TOK):
        s.check(False, f"{TOK} missing (make data)")
        return
    tmp = tempfile.mkdtemp()
    out = os.path.join(tmp, "map.u32")
    r = subprocess.run([sys.executable, SCRIPT, TOK, out, "--expect", "99092"], capture_output=True, text=True)
    s.check(r.returncode == 0, "script runs with --expect 99092")
    m = np.fromfile(out, "<u4") if r.returncode == 0 else np.zeros(0, np.uint32)
    s.check(len(m) == 129280, f"129280 entries ({len(m)})")
    s.check(len(set(m.tolist())) == 99092, "99092 distinct ids")
    first_seen = np.maximum.accumulate(m) if len(m) else m
    s.check(len(m) > 0 and m[0] == 0 and bool((np.diff(first_seen) <= 1).all()), "ids numbered in first-seen order")
    installed = os.path.join(DATA, "tokenizer", "engram_token_map.u32")
    s.check(os.path.exists(installed) and np.array_equal(np.fromfile(installed, "<u4"), m), "set-up's data file is this map")
    r = subprocess.run([sys.executable, SCRIPT, TOK, out, "--expect", "99093"], capture_output=True, text=True)
    s.check(r.returncode != 0 and "expected 99093" in r.stderr, "--expect refuses another count")
    hf_src = os.environ.get("DI_HF_SRC", os.path.join(ROOT, "..", ".ref", "hf_v41"))
    if os.path.exists(os.path.join(hf_src, "deepseek_v41", "modeling_deepseek_v41.py")):
        sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
        import hf_loader
        from transformers import PreTrainedTokenizerFast

        _, mm, _ = hf_loader.load(hf_src)
        lookup, n = mm.build_compressed_token_map(PreTrainedTokenizerFast(tokenizer_file=TOK))
        s.check(n == 99092 and np.array_equal(np.array(lookup, np.uint32), m), "equals transformers' build_compressed_token_map")
    else:
        s.skip("comparison with transformers", "no HF deepseek_v41 files")


if __name__ == "__main__":
    run_suite([test_token_map])
