"""The grammar test driver (tests/drivers/grammar_check.c) as a Python object: one process,
one JSON line per job."""
import json
import os
import subprocess

from harness import BUILD, TOKENIZER_JSON


class GrammarDriver:
    def __init__(self):
        exe = os.path.join(BUILD, "drivers", "grammar_check")
        self.p = subprocess.Popen([exe, TOKENIZER_JSON], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  encoding="utf-8")

    def job(self, **fields):
        self.p.stdin.write(json.dumps(fields, ensure_ascii=False) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("grammar_check died")
        return json.loads(line)

    def compile(self, kind, constraint=None):
        return self.job(op="compile", kind=kind, constraint=constraint)

    def match(self, kind, constraint, inputs):
        return self.job(op="match", kind=kind, constraint=constraint, inputs=inputs)

    def gen(self, kind, constraint, seeds, **opts):
        return self.job(op="gen", kind=kind, constraint=constraint, seeds=seeds, **opts)

    def replay(self, kind, constraint, outputs, thinking=False):
        return self.job(op="replay", kind=kind, constraint=constraint, outputs=outputs, thinking=thinking)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
