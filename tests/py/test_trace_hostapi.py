#!/usr/bin/env python3
"""bench/trace/hostapi.py on a made-up runtime-call trace: two host steps of two launches and a
sync each; the per-name sums and the issue/wait split between the syncs."""
import importlib.util
import os
import tempfile

from harness import ROOT, Suite

spec = importlib.util.spec_from_file_location("hostapi", os.path.join(ROOT, "bench", "trace", "hostapi.py"))
hostapi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hostapi)

# start_ns,end_ns,name: launches of 3 and 5 us, syncs waiting 10 and 2 us
ROWS = [(0, 3000, "cudaLaunchKernelExC_v11060"), (3000, 8000, "cudaLaunchKernelExC_v11060"),
        (8000, 18000, "cudaStreamSynchronize_v3020"), (20000, 23000, "cudaLaunchKernelExC_v11060"),
        (23000, 28000, "cudaLaunchKernelExC_v11060"), (30000, 32000, "cudaStreamSynchronize_v3020")]


def test_sums_and_steps(s):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "api.csv")
        with open(path, "w") as f:
            for start, end, name in ROWS:
                f.write(f'{start},{end},"{name}"\n')
        calls, total, syncs = hostapi.load(path)
        launch = "cudaLaunchKernelExC_v11060"
        s.check(calls[launch] == 4 and abs(total[launch] - 16.0) < 1e-9, "four launches, 16 us in all",
                f"{calls[launch]} {total[launch]}")
        s.check(calls["cudaStreamSynchronize_v3020"] == 2 and syncs == [(8000, 18000), (30000, 32000)], "the two syncs",
                str(syncs))
        s.check(hostapi.between_syncs(syncs) == [(12.0, 2.0)], "12 us issued after the first sync, then a 2 us wait",
                str(hostapi.between_syncs(syncs)))


if __name__ == "__main__":
    s = Suite()
    s.run(test_sums_and_steps)
    s.finish()
