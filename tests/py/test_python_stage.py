#!/usr/bin/env python3
"""The protocol is language-neutral in practice: a stage written in Python from
docs/PROTOCOL.md (tests/py/py_stage.py) replaces di-detok over ZeroMQ with the same output,
and two Python relays share a stage between the C tools (fan-out from di-tokenize, fan-in
to di-detok) with every request answered exactly once and every process ending cleanly."""
import json
import os
import subprocess
import sys
import tempfile

from harness import ROOT, free_port, json_lines, pipe, run_suite, tool

PY_STAGE = [sys.executable, os.path.join(ROOT, "tests", "py", "py_stage.py")]


def requests(n):
    lines = []
    for i in range(n):
        if i % 17 == 5:
            lines.append(b"{broken")
        elif i % 3:
            lines.append(json.dumps({"id": f"p{i}", "prompt": f"prompt {i}: caf\u00e9 \u4e2d\u6587 \U0001f600 " * (i % 5 + 1)},
                                    ensure_ascii=False).encode())
        else:
            lines.append(json.dumps({"id": f"c{i}", "model": "DeepSeek-V4-Pro", "thinking": {"type": "disabled"},
                                     "messages": [{"role": "user", "content": f"question {i}"}]}).encode())
    return b"\n".join(lines) + b"\n"


def run_with_files(procs_spec, data):
    """Starts the processes (argv, feeds_input, writes_output) and returns (output, rcs, stderrs)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as inp:
        inp.write(data)
        inp.seek(0)
        procs = [subprocess.Popen(argv, stdin=inp if takes_input else subprocess.DEVNULL,
                                  stdout=out if gives_output else subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for argv, takes_input, gives_output in procs_spec]
        try:
            errs = [p.communicate(timeout=120)[1].decode() for p in procs]
        finally:
            for p in procs:
                p.kill()
        out.seek(0)
        return out.read(), [p.returncode for p in procs], errs


def test_python_sink(s):
    data = requests(60)
    expected, _, rcs0 = pipe([[tool("di-tokenize")], [tool("di-detok")]], data)
    port = free_port()
    out, rcs, errs = run_with_files([(PY_STAGE + ["sink", "--in", f"@tcp://:{port}"], False, True),
                                     ([tool("di-tokenize"), "--out", f"tcp://127.0.0.1:{port}"], True, False)], data)
    ours, theirs = json_lines(expected), json_lines(out)
    s.check(rcs == [0, 0] and rcs0 == [0, 0] and len(theirs) == 60 and ours == theirs,
            "a Python sink replaces di-detok over ZeroMQ", f"rcs {rcs}, {len(theirs)} lines, {errs}")


def test_fan_out_fan_in(s):
    data = requests(200)
    pa, pb, p2 = free_port(), free_port(), free_port()
    relay = PY_STAGE + ["relay", "--out", f"tcp://127.0.0.1:{p2}", "--in"]
    out, rcs, errs = run_with_files([([tool("di-detok"), "--in", f"@tcp://:{p2}"], False, True),
                                     (relay + [f"@tcp://:{pa}"], False, False),
                                     (relay + [f"@tcp://:{pb}"], False, False),
                                     ([tool("di-tokenize"), "--out-peers", "2", "--out",
                                       f"tcp://127.0.0.1:{pa},tcp://127.0.0.1:{pb}"], True, False)], data)
    answers = json_lines(out)
    ids = sorted(a["id"] or "" for a in answers)
    forwarded = [int(e.split("forwarded ")[1].split()[0]) for e in errs[1:3] if "forwarded" in e]
    ok = rcs == [0, 0, 0, 0] and len(answers) == 200 and len(set(ids)) == len(ids) - ids.count("") + min(1, ids.count(""))
    ok = ok and len(forwarded) == 2 and min(forwarded) > 0 and sum(forwarded) == 200
    s.check(ok, "fan-out to two Python relays, fan-in to di-detok: 200 answers, each once",
            f"rcs {rcs}, {len(answers)} answers, forwarded {forwarded}, {[e[-300:] for e in errs]}")


def test_worker_dies(s):
    """One of two workers dies mid-run: every request still gets exactly one answer (the
    lost ones as errors naming them) and the sink exits non-zero, saying so."""
    data = requests(200)
    pa, pb, p2 = free_port(), free_port(), free_port()
    relay = PY_STAGE + ["relay", "--out", f"tcp://127.0.0.1:{p2}", "--in"]
    out, rcs, errs = run_with_files([([tool("di-detok"), "--idle-timeout", "1", "--in", f"@tcp://:{p2}"], False, True),
                                     (relay + [f"@tcp://:{pa}", "--die-after", "20"], False, False),
                                     (relay + [f"@tcp://:{pb}"], False, False),
                                     ([tool("di-tokenize"), "--out-peers", "2", "--eos-timeout", "2", "--out",
                                       f"tcp://127.0.0.1:{pa},tcp://127.0.0.1:{pb}"], True, False)], data)
    answers = json_lines(out)
    seqs = sorted(a.get("id") or "" for a in answers)
    lost = [a for a in answers if a.get("error", {}).get("code") == "lost"]
    expected_ids = sorted(json.loads(l).get("id", "") if l.startswith(b"{\"") else "" for l in data.split(b"\n") if l)
    ok = len(answers) == 200 and seqs == expected_ids and rcs[0] != 0 and rcs[1] == 3 and len(lost) >= 50
    s.check(ok, f"a worker dies after 20 frames: 200 answers, {len(lost)} of them 'lost' errors, sink exits non-zero",
            f"rcs {rcs}, {len(answers)} answers, {len(lost)} lost, {errs[0][-400:]}")


if __name__ == "__main__":
    run_suite([test_python_sink, test_fan_out_fan_in, test_worker_dies])
