#!/usr/bin/env python3
"""bench/trace/timeline.py on a made-up kernel trace: two replayed steps of a three-kernel graph
(two kernels overlapping on two streams, then an idle gap, then a third): the steps found, and
each step's wall, busy and idle time, its gap, and the time each kernel ran alone."""
import contextlib
import importlib.util
import io
import os
import tempfile

from harness import ROOT, Suite

spec = importlib.util.spec_from_file_location("timeline", os.path.join(ROOT, "bench", "trace", "timeline.py"))
timeline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timeline)

# start_ns,end_ns,stream,graph,graph_node,grid_x,grid_y,grid_z,name (one eager kernel, graph 0, ignored)
STEP = [(0, 10000, 1, 1, "void a_kernel(int)"), (5000, 15000, 2, 2, "void b_kernel(int)"),
        (20000, 30000, 1, 3, "void c_kernel(int)")]


def write_trace(path):
    with open(path, "w") as f:
        f.write('1,2,7,0,0,1,1,1,"eager_kernel"\n')
        for base in (1000000, 2000000):
            for start, end, stream, node, name in STEP:
                f.write(f'{base + start},{base + end},{stream},5,{node},1,1,1,"{name}"\n')


def test_steps_and_summary(s):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.csv")
        write_trace(path)
        steps, per = timeline.steps_of(timeline.load(path))
        s.check(per == 3 and len(steps) == 2 and all(len(st) == 3 for st in steps),
                "two replayed steps of three kernels (the eager kernel left out)", f"{per} {[len(st) for st in steps]}")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            timeline.summarize(steps[0], 5, 10)
        text = out.getvalue()
        s.check("wall 30.0 us, kernel time 30.0 us, busy 25.0 us, idle 5.0 us (1 gaps)" in text,
                "wall, kernel, busy and idle time of a step", text)
        alone = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if "_kernel" in line and "->" not in line}
        s.check(alone == {"a_kernel": 5.0, "b_kernel": 5.0, "c_kernel": 10.0}, "each kernel's time alone on the GPU", str(alone))
        s.check("5.00  b_kernel -> c_kernel" in text, "the idle gap between b and c", text)


def test_eager_passes(s):
    """Two eager passes (graph 0) cut at a marker kernel: each pass from its marker to the next."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.csv")
        with open(path, "w") as f:
            for base in (0, 100000):
                f.write(f'{base},{base + 1000},7,0,0,1,1,1,"void mark_kernel(int)"\n')
                f.write(f'{base + 2000},{base + 6000},7,0,0,1,1,1,"void work_kernel(int)"\n')
                f.write(f'{base + 4000},{base + 8000},9,0,0,1,1,1,"void side_kernel(int)"\n')
        passes = timeline.passes_of(timeline.load(path), "mark_kernel")
        s.check([len(p) for p in passes] == [3, 3] and passes[1][0]["start"] == 100000, "two passes of three kernels",
                str([len(p) for p in passes]))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            timeline.summarize(passes[0], 5, 10)
        text = out.getvalue()
        s.check("wall 8.0 us, kernel time 9.0 us, busy 7.0 us, idle 1.0 us (1 gaps)" in text, "a pass's wall, busy and idle time",
                text)
        try:
            timeline.passes_of(timeline.load(path), "absent_kernel")
            s.check(False, "a marker that is not in the trace is refused", "no exit")
        except SystemExit as e:
            s.check("absent_kernel" in str(e), "a marker that is not in the trace is refused", str(e))


if __name__ == "__main__":
    s = Suite()
    s.run(test_steps_and_summary)
    s.run(test_eager_passes)
    s.finish()
