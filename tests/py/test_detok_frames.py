#!/usr/bin/env python3
"""di-detok on frames as a decode stage would send them (crafted here with msgpack): answer
shapes, streaming deltas, input order, stop strings, the account of lost and unfinished
requests against the origin's ledger, and bad frames on a pipe and on a socket."""
import functools
import json
import subprocess

import msgpack
from tokenizers import Tokenizer

from harness import TOKENIZER_JSON, crafted_frame, free_port, json_lines, run_suite, tool

TOK = Tokenizer.from_file(TOKENIZER_JSON)


def ids(text):
    return TOK.encode(text, add_special_tokens=False).ids


frame = functools.partial(crafted_frame, "fake-decode")


def eos(announced, served, ids_=None):
    extra = {"ids": ids_} if ids_ else {}
    return frame("eos", 0, sender="fake-decode@test", origin="fake-origin", announced=announced, served=served, **extra)


def detok(data, *args):
    p = subprocess.run([tool("di-detok"), *args], input=data, capture_output=True, timeout=60)
    return json_lines(p.stdout), p.returncode, p.stderr.decode()


CHAT = {"shape": "chat", "thinking": True, "tools": True, "json": False, "prompt_tokens": 5}
TOOL_TEXT = ("I should call it.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
             "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n"
             "</｜DSML｜ invoke>\n</｜DSML｜ calls>")


def test_shapes(s):
    data = (frame("tokens", 0, tokens=ids("Hello"), meta={"shape": "prompt"}) +
            frame("tokens", 0, tokens=ids(" world")) +
            frame("done", 0, finish_reason="length", usage={"prompt_tokens": 3, "completion_tokens": 2}) +
            frame("tokens", 1, tokens=ids(TOOL_TEXT), meta=CHAT) +
            frame("done", 1, finish_reason="stop", usage={"prompt_tokens": 5, "completion_tokens": 30}) +
            frame("tokens", 2, tokens=ids("Bonjour"), meta={"shape": "batch", "custom_id": "cid-2"}) +
            frame("done", 2, finish_reason="stop", usage={"prompt_tokens": 4, "completion_tokens": 1}) +
            eos(3, 3))
    out, rc, err = detok(data)
    ok = rc == 0 and len(out) == 3
    ok = ok and out[0] == {"id": "r0", "text": "Hello world", "finish_reason": "length",
                           "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    call = out[1].get("tool_calls", [{}])[0].get("function", {}) if ok else {}
    ok = ok and out[1]["reasoning_content"] == "I should call it." and call.get("name") == "get_weather"
    ok = ok and json.loads(call.get("arguments", "null")) == {"city": "Paris"} and out[1]["finish_reason"] == "tool_calls"
    ok = ok and out[2]["custom_id"] == "cid-2" and out[2]["response"]["body"]["choices"][0]["message"]["content"] == "Bonjour"
    s.check(ok, "prompt, chat with a tool call, batch shapes", f"rc {rc} {out} {err}")


def test_stream_and_stop(s):
    text = "one two STOP three"
    data = b"".join(frame("tokens", 0, tokens=[t], **({"meta": {"shape": "prompt", "stop": ["STOP"]}} if i == 0 else {}))
                    for i, t in enumerate(ids(text)))
    data += frame("done", 0, finish_reason="length", usage={"prompt_tokens": 1, "completion_tokens": 5}) + eos(1, 1)
    out, rc, err = detok(data, "--stream")
    deltas = "".join(l["delta"].get("content", "") for l in out if "delta" in l)
    final = out[-1] if out else {}
    s.check(rc == 0 and final.get("text") == "one two " and final.get("finish_reason") == "stop" and deltas == "one two ",
            "stream deltas add up to the answer; a stop string ends it", f"{out} {err}")


def test_ordered(s):
    data = b"".join(frame("done", seq, finish_reason="stop", meta={"shape": "prompt"}) for seq in (2, 0, 3, 1)) + eos(4, 4)
    plain, rc1, _ = detok(data)
    ordered, rc2, _ = detok(data, "--ordered")
    s.check(rc1 == rc2 == 0 and [l["id"] for l in plain] == ["r2", "r0", "r3", "r1"] and
            [l["id"] for l in ordered] == ["r0", "r1", "r2", "r3"], "completion order, and input order with --ordered")


def test_lost_and_unfinished(s):
    data = (frame("done", 0, finish_reason="stop", meta={"shape": "prompt"}) +
            frame("tokens", 1, tokens=ids("half"), meta={"shape": "prompt"}) +
            eos(4, 1, ["r0", "r1", "r2", "r3"]))
    out, rc, err = detok(data, "--ordered")
    codes = [l.get("error", {}).get("code") for l in out]
    s.check(rc != 0 and [l["id"] for l in out] == ["r0", "r1", "r2", "r3"] and codes == [None, "incomplete", "lost", "lost"]
            and "got no answer" in err, "unfinished and never-seen requests answered as errors, exit non-zero",
            f"rc {rc} {out} {err}")


def test_no_eos(s):
    out, rc, err = detok(frame("done", 0, finish_reason="stop", meta={"shape": "prompt"}))
    s.check(rc != 0 and len(out) == 1 and "end-of-stream" in err, "input ending without end-of-stream is an error",
            f"rc {rc} {err}")


def test_bad_frames_on_a_pipe(s):
    bad_known = msgpack.packb({"v": 1, "type": "tokens", "id": "rb", "seq": 1, "tokens": "nope"})
    data = frame("done", 0, finish_reason="stop") + bad_known + b"\xc1garbage" + frame("done", 2, finish_reason="stop")
    out, rc, err = detok(data)
    ok = rc != 0 and [l["id"] for l in out[:2]] == ["r0", "rb"] and out[1]["error"]["code"] == "bad_frame"
    ok = ok and "field 'tokens'" in out[1]["error"]["message"] and "invalid msgpack" in err
    s.check(ok, "a bad frame with an id is answered; garbage ends a byte stream with a clear reason", f"{out} {err}")


def test_bad_frames_on_a_socket(s):
    import zmq
    port = free_port()
    sink = subprocess.Popen([tool("di-detok"), "--in", f"@tcp://:{port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    for msg in [frame("done", 0, finish_reason="stop"), b"\xc1garbage", msgpack.packb({"v": 1, "type": "warp", "id": "x"}),
                frame("done", 1, finish_reason="stop"), eos(2, 2)]:
        push.send(msg)
    push.close(linger=5000)
    ctx.term()
    out, err = sink.communicate(timeout=60)
    answers = json_lines(out)
    s.check(sink.returncode == 0 and [a["id"] for a in answers] == ["r0", "r1"] and "unknown frame type 'warp'" in err.decode(),
            "over ZeroMQ a bad message is skipped and the stream goes on", f"{answers} {err}")


if __name__ == "__main__":
    run_suite([test_shapes, test_stream_and_stop, test_ordered, test_lost_and_unfinished, test_no_eos,
               test_bad_frames_on_a_pipe, test_bad_frames_on_a_socket])
