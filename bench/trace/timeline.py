#!/usr/bin/env python3
"""Summarize a ditrace.csv (bench/trace/ditrace.c): the replayed graph steps of the most
launched graph, one step at a time: wall, kernel time, busy (any kernel running) and idle time,
per-kernel time alone on the GPU (what the step waits on), and the longest idle gaps. With
--passes KERNEL, eagerly launched passes instead (a prefill, an eager step), each starting at a
launch of KERNEL.

  timeline.py trace.csv [--step K] [--gaps N] [--top N] [--passes KERNEL]
"""
import argparse
import collections
import csv


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.reader(f):
            start, end, stream, graph, node, gx, gy, gz, name = r
            rows.append(dict(start=int(start), end=int(end), stream=int(stream), graph=int(graph), node=int(node),
                             grid=f"({gx},{gy},{gz})", name=name))
    return rows


def short(name):
    n = name.split("(")[0]
    return n.replace("void ", "")[:48]


def steps_of(rows):
    graphs = collections.Counter(r["graph"] for r in rows if r["graph"])
    if not graphs:
        raise SystemExit("no graph kernels in the trace")
    g = graphs.most_common(1)[0][0]
    ks = sorted((r for r in rows if r["graph"] == g), key=lambda r: r["start"])
    per = len({r["node"] for r in ks})
    return [ks[i:i + per] for i in range(0, len(ks) - per + 1, per)], per


def passes_of(rows, marker):
    ks = sorted(rows, key=lambda r: r["start"])
    starts = [i for i, k in enumerate(ks) if marker in k["name"]]
    if not starts:
        raise SystemExit(f"no kernel named like '{marker}' in the trace")
    return [ks[a:b] for a, b in zip(starts, starts[1:] + [len(ks)])]


def summarize(step, gaps_n, top_n):
    t0 = min(k["start"] for k in step)
    t1 = max(k["end"] for k in step)
    events = sorted([(k["start"], 1, i) for i, k in enumerate(step)] + [(k["end"], -1, i) for i, k in enumerate(step)])
    running, last, busy, alone = set(), t0, 0, collections.Counter()
    gaps = []
    prev_end_kernel = None
    for t, kind, i in events:
        if running:
            busy += t - last
            if len(running) == 1:
                alone[short(step[next(iter(running))]["name"])] += t - last
        elif t > last and prev_end_kernel is not None:
            gaps.append((t - last, short(step[prev_end_kernel]["name"]), short(step[i]["name"])))
        if kind == 1:
            running.add(i)
        else:
            running.discard(i)
            prev_end_kernel = i
        last = t
    total = collections.Counter()
    calls = collections.Counter()
    for k in step:
        total[short(k["name"])] += k["end"] - k["start"]
        calls[short(k["name"])] += 1
    streams = collections.Counter(k["stream"] for k in step)
    wall = t1 - t0
    print(f"step: {len(step)} kernels on streams {dict(streams)}; wall {wall / 1e3:.1f} us, kernel time "
          f"{sum(total.values()) / 1e3:.1f} us, busy {busy / 1e3:.1f} us, idle {(wall - busy) / 1e3:.1f} us "
          f"({len(gaps)} gaps)")
    print(f"\n{'kernel':48s} {'alone us':>9s} {'total us':>9s} {'calls':>6s}")
    for name, t in sorted(total.items(), key=lambda x: -alone[x[0]])[:top_n]:
        print(f"{name:48s} {alone[name] / 1e3:9.1f} {t / 1e3:9.1f} {calls[name]:6d}")
    print(f"\nlongest idle gaps (us, after -> before)")
    for g, a, b in sorted(gaps, reverse=True)[:gaps_n]:
        print(f"  {g / 1e3:6.2f}  {a} -> {b}")
    hist = collections.Counter(min(int(g / 500), 10) for g, _, _ in gaps)
    print("gap sizes (0.5 us bins, last 5+):", {f"{b * 0.5:.1f}": hist[b] for b in sorted(hist)},
          f"sum {sum(g for g, _, _ in gaps) / 1e3:.1f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=-2, help="which replayed step (default: the one before the last)")
    ap.add_argument("--gaps", type=int, default=25)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--list", action="store_true", help="also every kernel of the step in start order")
    ap.add_argument("--passes", metavar="KERNEL",
                    help="eager passes, each from a launch of KERNEL to the next (hc_fill_kernel: a forward's second "
                         "kernel; its embedding gather then counts in the pass before)")
    a = ap.parse_args()
    if a.passes:
        steps = passes_of(load(a.csv), a.passes)
        print(f"{len(steps)} passes from {a.passes}; kernels:", " ".join(str(len(s)) for s in steps))
    else:
        steps, per = steps_of(load(a.csv))
        print(f"{len(steps)} replayed steps of {per} kernels;", end=" ")
    print("walls (us):", " ".join(f"{(max(k['end'] for k in s) - min(k['start'] for k in s)) / 1e3:.0f}" for s in steps))
    summarize(steps[a.step], a.gaps, a.top)
    if a.list:
        step = steps[a.step]
        t0 = min(k["start"] for k in step)
        print(f"\n{'start':>8s} {'end':>8s} {'us':>6s} stream kernel grid")
        for k in sorted(step, key=lambda k: k["start"]):
            print(f"{(k['start'] - t0) / 1e3:8.2f} {(k['end'] - t0) / 1e3:8.2f} {(k['end'] - k['start']) / 1e3:6.2f} "
                  f"{k['stream']:6d} {short(k['name'])} {k['grid']}")


if __name__ == "__main__":
    main()
