#!/usr/bin/env python3
"""A pipeline stage written in Python from docs/PROTOCOL.md alone (msgpack + pyzmq).

    py_stage.py sink  --in ENDPOINT            round-trip sink: like di-detok for request frames
    py_stage.py relay --in ENDPOINT --out ENDPOINT   forwards every frame (a do-nothing stage)
                      [--die-after N]                dies abruptly after N frames (a crashed worker)

ENDPOINT follows the tools' convention: "@tcp://..." binds, "tcp://..." connects."""
import argparse, json, os, sys, time, uuid
import msgpack, zmq

TERMINAL = {"request", "done", "error"}


def open_socket(ctx, kind, spec):
    s = ctx.socket(kind)
    if spec.startswith("@"):
        s.bind(spec[1:].replace("tcp://:", "tcp://127.0.0.1:"))
    else:
        s.connect(spec)
    return s


def frames_until_complete(sock, ledger):
    """Yields frames; consumes eos frames into the ledger and stops once the served counts
    of distinct senders add up to the announced count (PROTOCOL.md section 5)."""
    while True:
        frame = msgpack.unpackb(sock.recv(), raw=False)
        if frame.get("v") != 1:
            raise SystemExit(f"unsupported frame version {frame.get('v')}")
        if frame["type"] != "eos":
            yield frame
            continue
        ledger.setdefault("origin", frame["origin"])
        ledger.setdefault("announced", frame["announced"])
        ledger.setdefault("ids", frame.get("ids"))
        ledger.setdefault("served", {})[frame["sender"]] = frame["served"]
        if sum(ledger["served"].values()) >= ledger["announced"]:
            return


def sink(args):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    ctx = zmq.Context()
    inp = open_socket(ctx, zmq.PULL, args.inp)
    out = sys.stdout.buffer
    for f in frames_until_complete(inp, {}):
        if f["type"] == "request":
            text = tok.decode(f["prompt"], skip_special_tokens=False)
            line = {"id": f["id"], "prompt": text, "prompt_tokens": len(f["prompt"])}
        elif f["type"] == "error":
            line = {"id": f["id"], "error": {k: f.get(k) for k in ("stage", "code", "message")}}
        else:
            continue
        out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    inp.close(linger=0)
    ctx.term()


def relay(args):
    ctx = zmq.Context()
    inp = open_socket(ctx, zmq.PULL, args.inp)
    out = open_socket(ctx, zmq.PUSH, args.out)
    me = f"py-relay@{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    ledger, served, forwarded = {}, 0, 0
    for f in frames_until_complete(inp, ledger):
        now = int(time.time() * 1e6)
        f.setdefault("trace", []).append(["py-relay", now, now])
        out.send(msgpack.packb(f, use_bin_type=True))
        forwarded += 1
        if forwarded == args.die_after:
            time.sleep(0.2)  # let the frames already sent leave, then vanish without an eos
            os._exit(3)
        served += f["type"] in TERMINAL
    inp.close(linger=0)  # upstream sees us leave once our input is complete
    eos = {"v": 1, "type": "eos", "sender": me, "origin": ledger["origin"], "announced": ledger["announced"],
           "served": served}
    if ledger.get("ids"):
        eos["ids"] = ledger["ids"]
    out.send(msgpack.packb(eos, use_bin_type=True))
    out.close(linger=30000)
    ctx.term()
    print(f"py-relay forwarded {forwarded}", file=sys.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("role", choices=["sink", "relay"])
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out")
    ap.add_argument("--die-after", type=int, default=-1)
    ap.add_argument("--tokenizer", default=os.path.join(os.environ.get("DI_DATA", "data"), "tokenizer", "tokenizer.json"))
    a = ap.parse_args()
    sink(a) if a.role == "sink" else relay(a)
