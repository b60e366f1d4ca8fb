/* di-detok: the sink. Token, done and error frames in; one JSON line per request out.
 * Request frames that reach it (nothing generated them an answer) are written back as
 * text: di-tokenize | di-detok is the round trip. At the end it answers, as errors, every
 * request the origin announced that never completed, and exits non-zero if there were any. */
#include "cli.h"
#include "io.h"
#include "log.h"
#include "sink.h"
#include "stats.h"
#include "tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *STAGE = "di-detok";

static FILE *open_output(const char *spec)
{
    if (!strcmp(spec, "-")) return stdout;
    if (strstr(spec, "://")) die("--out: di-detok writes JSONL to stdout or a file, not '%s'", spec);
    FILE *f = fopen(spec, "w");
    if (!f) die("cannot open --out %s: %s", spec, strerror(errno));
    return f;
}

int main(int argc, char **argv)
{
    const char *tokenizer_path = NULL;
    bool stream = false, ordered = false, trace = false;
    cli_opt_t opts[] = {
        {"tokenizer", CLI_STRING, &tokenizer_path, "PATH", "tokenizer.json (default: data/tokenizer/ next to bin/)", 0, 0},
        {"stream", CLI_FLAG, &stream, NULL, "write delta lines as tokens arrive, then the final line", 0, 0},
        {"ordered", CLI_FLAG, &ordered, NULL, "write final lines in input order (default: completion order)", 0, 0},
        {"trace", CLI_FLAG, &trace, NULL, "add each request's per-stage trace to its final line", 0, 0},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-detok",
        .usage = "[options] > results.jsonl",
        .summary = "Turns generated token ids into answers: one JSON line per request (text, reasoning, tool calls,\n"
                   "finish reason, usage), in the shape the request came in. Request frames are written back as\n"
                   "their prompt text (the round trip of di-tokenize).",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);
    if (stream && ordered) die("--stream and --ordered do not go together");

    tokenizer_t *tok = tokenizer_load_or_die(tokenizer_path);

    stage_stats_t st;
    stats_start(&st, STAGE);
    frame_in_t *in = frame_in_open(common.in, &common);
    sink_t *sink = sink_new(tok, open_output(common.out), (sink_options_t){stream, ordered, trace}, &st);

    bool fatal = false;
    for (;;) {
        frame_t f;
        in_bad_t bad;
        in_result_t r = frame_in_next(in, &f, &bad);
        if (r == IN_END) break;
        if (r == IN_FATAL) {
            log_error("%s", bad.reason);
            fatal = true;
            break;
        }
        uint64_t t0 = now_ns();
        if (r == IN_BAD) sink_bad_frame(sink, &bad);
        else sink_frame(sink, &f);
        free(bad.id);
        frame_free(&f);
        st.busy_ns += now_ns() - t0;
    }
    frame_in_close(in);
    uint64_t missing = sink_finish(sink, frame_in_ledger(in));
    if (common.stats) stats_print(&st, frame_in_counters(in), NULL);
    bool clean = !fatal && !missing && ledger_complete(frame_in_ledger(in));
    sink_free(sink);
    frame_in_free(in);
    io_shutdown();
    tokenizer_free(tok);
    if (!clean) {
        if (missing) log_error("%llu request(s) announced upstream got no answer from the pipeline", (unsigned long long)missing);
        else if (!fatal) log_error("the input ended before the pipeline's end-of-stream");
        return 1;
    }
    return 0;
}
