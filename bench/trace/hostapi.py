#!/usr/bin/env python3
"""Sum a ditrace runtime-call trace (DI_TRACE_API_OUT, bench/trace/ditrace.c) per call name:
calls, total and mean host microseconds, largest first: what a host-launched (eager) step
spends on the CUDA runtime; then, between consecutive stream synchronizations (a step each
where the program syncs once a step), the host's issue time and its wait in the sync: a wait
near zero means the host, not the GPU, sets the step time.

  hostapi.py api.csv [--top N]
"""
import argparse
import collections
import csv


def load(path):
    """Per call name: calls and total microseconds; the (start, end) ns of every stream sync."""
    calls, total, syncs = collections.Counter(), collections.Counter(), []
    with open(path) as f:
        for start, end, name in csv.reader(f):
            calls[name] += 1
            total[name] += (int(end) - int(start)) / 1000
            if name.startswith("cudaStreamSynchronize"):
                syncs.append((int(start), int(end)))
    return calls, total, sorted(syncs)


def between_syncs(syncs):
    """(issue us, wait us) per interval: from one sync's end to the next sync's start, then that sync."""
    return [((s1 - e0) / 1000, (e1 - s1) / 1000) for (_, e0), (s1, e1) in zip(syncs, syncs[1:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    calls, total, syncs = load(a.csv)
    print(f"{'call':48} {'calls':>8} {'total us':>12} {'mean us':>9}")
    for name, us in total.most_common(a.top):
        print(f"{name[:48]:48} {calls[name]:8d} {us:12.1f} {us / calls[name]:9.2f}")
    print("between syncs (us): issue, wait")
    for issue, wait in between_syncs(syncs)[: a.top]:
        print(f"  {issue:10.1f} {wait:10.1f}")


if __name__ == "__main__":
    main()
