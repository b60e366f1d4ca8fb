"""Shared bits for the Python tests: paths to the built tools, the test data, running
pipelines, crafted frames, and the check counter that prints the "N passed, N failed" line
tests/run sums."""
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback

import msgpack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
DATA = os.path.join(ROOT, os.environ.get("DI_DATA", "data"))
TOKENIZER_JSON = os.path.join(DATA, "tokenizer", "tokenizer.json")


def tool(name):
    return os.path.join(BIN, name)


def data_records(name):
    """The records of tests/data/<name>, a JSON-lines file."""
    with open(os.path.join(ROOT, "tests", "data", name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pipe(commands, data, timeout=120):
    """Runs commands (lists of argv) as a shell-style pipeline; returns (stdout, stderrs, rcs)."""
    procs, prev = [], None
    for i, cmd in enumerate(commands):
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE if i == 0 else prev.stdout, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        if prev:
            prev.stdout.close()
        procs.append(p)
        prev = p
    def feed():
        try:
            procs[0].stdin.write(data)
            procs[0].stdin.close()
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=feed)  # the output must be read while input is written
    writer.start()
    out = procs[-1].stdout.read()
    writer.join()
    errs, rcs = [], []
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        errs.append(p.stderr.read().decode("utf-8", "replace"))
        rcs.append(p.returncode)
    return out, errs, rcs


def tokenizer_with_v41_system(directory):
    """A copy of the V4 tokenizer with V4.1's <｜System｜> turn marker appended as one more
    added token (the V4 file lacks it), written into directory; returns its path. For
    tokenizer-level tests of the V4.1 template only: the id is past the model's vocabulary."""
    with open(TOKENIZER_JSON, encoding="utf-8") as f:
        t = json.load(f)
    t["added_tokens"].append({"id": 129280, "content": "<｜System｜>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": False})
    path = os.path.join(directory, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
    return path


def json_lines(out):
    """The JSON lines of a tool's output (split on "\n" only: U+2028 may sit inside a line)."""
    return [json.loads(line) for line in out.decode("utf-8").split("\n") if line]


def frames(data):
    """The msgpack frames in a stage's output."""
    return list(msgpack.Unpacker(io.BytesIO(data), raw=False))


def frame_bytes(fs):
    """Frames (dicts) as the msgpack bytes a stage reads."""
    return b"".join(msgpack.packb(f, use_bin_type=True) for f in fs)


def crafted_frame(upstream, kind, seq, **fields):
    """A frame as the fake stage `upstream` would write it, in msgpack: its trace hop, and the
    id r<seq> unless given (an eos frame has none)."""
    f = {"v": 1, "type": kind, "seq": seq, "trace": [[upstream, 1, 2]]}
    if kind != "eos":
        f["id"] = fields.pop("id", f"r{seq}")
    f.update(fields)
    return msgpack.packb(f, use_bin_type=True)


class Suite:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def check(self, ok, name, detail=""):
        if ok:
            self.passed += 1
            print(f"ok {name}")
        else:
            self.failed += 1
            print(f"not ok {name}: {detail}"[:2000])
        sys.stdout.flush()
        return ok

    def skip(self, name, why):
        self.skipped += 1
        print(f"skip {name} ({why})")

    def run(self, fn, *args):
        """Runs one test function, fn(suite, *args), and prints its time; an exception counts as
        its failure."""
        t0 = time.time()
        try:
            fn(self, *args)
        except Exception:
            self.check(False, fn.__name__, traceback.format_exc())
        print(f"# {fn.__name__}: {time.time() - t0:.1f} s")

    def case(self, fn):
        """Runs an assert-style test function now (a decorator): it passes when it returns, fails
        with its traceback when it raises."""
        try:
            fn()
        except Exception:
            self.check(False, fn.__name__, traceback.format_exc(limit=3))
        else:
            self.check(True, fn.__name__)
        return fn

    def finish(self):
        tail = f", {self.skipped} skipped" if self.skipped else ""
        print(f"{self.passed} passed, {self.failed} failed{tail}")
        sys.exit(1 if self.failed else 0)


def run_suite(tests, *args):
    """Runs each test function as fn(suite, *args), then prints the summary and exits."""
    s = Suite()
    for fn in tests:
        s.run(fn, *args)
    s.finish()
