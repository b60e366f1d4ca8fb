"""Shared bits for the Python tests: paths to the built tools, running pipelines, and the
check counter that prints the "N passed, N failed" line tests/run sums."""
import json
import os
import socket
import subprocess
import sys
import threading
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
DATA = os.path.join(ROOT, os.environ.get("DI_DATA", "data"))
TOKENIZER_JSON = os.path.join(DATA, "tokenizer", "tokenizer.json")


def tool(name):
    return os.path.join(BIN, name)


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

    def run(self, fn):
        """Runs one test function; an exception counts as its failure."""
        try:
            fn(self)
        except Exception:
            self.check(False, fn.__name__, traceback.format_exc())

    def finish(self):
        tail = f", {self.skipped} skipped" if self.skipped else ""
        print(f"{self.passed} passed, {self.failed} failed{tail}")
        sys.exit(1 if self.failed else 0)
