#!/usr/bin/env python3
"""The distributed layout (scripts/topology.sh): di-tokenize -> di-prefill -> two di-decode
workers (PUSH/PULL) -> di-detok, each a separate process on tcp loopback.

  4. every request is answered exactly once, with the same answer the plain pipe gives, and
     both workers take part; a worker killed mid-run (SIGKILL) still leaves every request
     with exactly one output line (its lost requests as errors) and di-detok says so."""
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time

from harness import DATA, ROOT, TOKENIZER_JSON, Suite, json_lines, pipe, tool

MODEL = os.path.join(DATA, "models", "tiny-v41")
SCRIPT = os.path.join(ROOT, "scripts", "topology.sh")


def requests(n, seed):
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        r = {"id": f"t{i}", "prompt": [rng.randrange(129280) for _ in range(1 + (i * 11) % 50)],
             "max_tokens": 2 + (i * 5) % 30}
        if i % 2:
            r["temperature"] = 0.7
        else:
            r["temperature"] = 0
        reqs.append(r)
    reqs.append({"id": "bad", "prompt": []})  # answered by di-tokenize
    return reqs


def free_ports(n):
    """A base port with n consecutive free ports after it."""
    for _ in range(100):
        base = random.randrange(20000, 60000)
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + k))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def topology(reqs, logs, **env):
    path = os.path.join(logs, "in.jsonl")
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in reqs))
    e = dict(os.environ, BIN=os.environ.get("BIN", "bin"), MODEL=MODEL, PORT=str(free_ports(4)), LOGS=logs,
             **{k: str(v) for k, v in env.items()})
    return subprocess.Popen(["bash", SCRIPT, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=ROOT)


def plain(reqs):
    data = "".join(json.dumps(r) + "\n" for r in reqs).encode()
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-prefill"), "--model", MODEL],
                           [tool("di-decode"), "--model", MODEL], [tool("di-detok")]], data)
    assert rcs == [0, 0, 0, 0], errs
    return {a["id"]: a for a in json_lines(out)}


def served(logs, name):
    try:
        with open(os.path.join(logs, name + ".log")) as f:
            return int(next(l for l in f if "stats: requests " in l).split()[-1])
    except (OSError, StopIteration):
        return -1


def test_two_workers(s):
    reqs = requests(40, 1)
    want = plain(reqs)
    with tempfile.TemporaryDirectory() as logs:
        p = topology(reqs, logs)
        out, err = p.communicate(timeout=300)
        answers = json_lines(out)
        ids = [a["id"] for a in answers]
        per_worker = [served(logs, "di-decode.1"), served(logs, "di-decode.2")]
        same = all(a == want.get(a["id"]) for a in answers)
        ok = p.returncode == 0 and sorted(ids) == sorted(want) and len(ids) == len(set(ids)) == 41 and same
        s.check(ok and min(per_worker) > 0 and sum(per_worker) == 40,
                f"two workers over tcp: 41 requests answered once each, as the plain pipe answers them "
                f"(workers took {per_worker})", f"rc {p.returncode}, {len(ids)} lines, same {same}, {err.decode()[-600:]}")


def test_worker_killed(s):
    reqs = requests(40, 2)
    with tempfile.TemporaryDirectory() as logs:
        p = topology(reqs, logs, IDLE_TIMEOUT=1, THREADS=1)
        lines = []
        first = p.stdout.readline()  # mid-run: an answer is out, others are being generated
        if first:
            lines.append(first)
        with open(os.path.join(logs, "pids")) as f:
            pids = dict(l.split() for l in f if l.strip())
        os.kill(int(pids["di-decode.1"]), signal.SIGKILL)
        killed_at = time.time()
        rest = p.stdout.read()  # the same buffered reader as the first line
        p.wait(timeout=300)
        with open(os.path.join(logs, "di-detok.log")) as f:
            err = f.read()
        answers = json_lines(b"".join(lines) + rest)
        ids = [a.get("id") for a in answers]
        errors = [a for a in answers if "error" in a]
        lost = [a for a in errors if a["error"]["code"] in ("lost", "incomplete")]
        ok = sorted(ids) == sorted(r["id"] for r in reqs) and len(set(ids)) == len(ids) and p.returncode != 0
        s.check(ok and lost and "got no answer" in err,
                f"a worker SIGKILLed mid-run: all 41 requests still get exactly one line ({len(lost)} lost ones as "
                f"errors, {len(answers) - len(errors)} answers, {time.time() - killed_at:.1f} s after the kill)",
                f"rc {p.returncode}, {len(ids)} lines, {len(set(ids))} distinct, {err[-800:]}")


if __name__ == "__main__":
    s = Suite()
    if not (os.path.exists(os.path.join(MODEL, "model.safetensors")) and os.path.exists(TOKENIZER_JSON)):
        s.skip("topology", "needs make and make data")
    else:
        s.run(test_two_workers)
        s.run(test_worker_killed)
    s.finish()
