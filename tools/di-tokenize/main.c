/* di-tokenize: JSONL requests in, request frames out; the origin of the pipeline.
 * Every non-blank line becomes exactly one frame: a request, or an error naming the line. */
#include "cli.h"
#include "io.h"
#include "linereader.h"
#include "log.h"
#include "request.h"
#include "stats.h"
#include "tokenizer.h"
#include "origin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *STAGE = "di-tokenize";

static void send_error(frame_out_t *out, frame_t *req, uint64_t in_us, const char *code, const char *message,
                       stage_stats_t *st)
{
    frame_t e;
    frame_make_error(&e, req->id, req->seq, STAGE, code, message);
    if (req->has_meta) {
        e.has_meta = true;
        frame_meta_copy(&e.meta, &req->meta);
    }
    frame_add_hop(&e, STAGE, in_us, wall_us());
    frame_out_send(out, &e);
    frame_free(&e);
    st->errors++;
}

static int open_input(const char *spec)
{
    if (!strcmp(spec, "-")) return STDIN_FILENO;
    if (strstr(spec, "://")) die("--in: di-tokenize reads JSONL from stdin or a file, not '%s'", spec);
    int fd = open(spec, O_RDONLY);
    if (fd < 0) die("cannot open --in %s: %s", spec, strerror(errno));
    return fd;
}

int main(int argc, char **argv)
{
    const char *tokenizer_path = NULL, *template = "auto";
    int64_t max_line = 16 << 20, max_prompt = 1 << 20, context = 1 << 20;
    cli_opt_t opts[] = {
        {"tokenizer", CLI_STRING, &tokenizer_path, "PATH", "tokenizer.json (default: data/tokenizer/ next to bin/)", 0, 0},
        {"max-line-bytes", CLI_INT, &max_line, "N", "longest accepted input line (default 16 MiB)", 1, 1ll << 32},
        {"max-prompt-tokens", CLI_INT, &max_prompt, "N", "longest accepted prompt in tokens (default 1048576)", 1, FRAME_MAX_TOKENS},
        {"context-length", CLI_INT, &context, "N", "model context, for chat requests' default max_tokens (default 1048576)", 1, 1ll << 32},
        {"template", CLI_STRING, &template, "auto|v41|v4", "chat template: auto = V4.1 if the tokenizer has its markers, else V4", 0, 0},
        {0},
    };
    cli_spec_t spec = {
        .name = "di-tokenize",
        .usage = "[options] < requests.jsonl | di-grammar | di-prefill | di-decode | di-detok",
        .summary = "Reads JSONL requests (raw prompts, OpenAI chat bodies, or OpenAI Batch API lines), renders chats\n"
                   "as the official DeepSeek V4.1 renderer does, tokenizes, and writes one request frame per\n"
                   "non-blank line (or an error frame naming what was wrong with the line).",
        .opts = opts,
    };
    cli_common_t common;
    cli_parse(&spec, argc, argv, &common);

    stage_stats_t st;
    stats_start(&st, STAGE);
    int in_fd = open_input(common.in);
    frame_out_t *out = frame_out_open(common.out, &common, STAGE);
    tokenizer_t *tok = tokenizer_load_or_die(tokenizer_path);
    const char *template_model = request_template_model(tok, template);
    if (!template_model) die("bad value '%s' for --template: expected auto, v41 or v4", template);
    if (!strcmp(template, "auto") && strcmp(template_model, "DeepSeek-V4.1-Flash"))
        log_warn("the tokenizer lacks V4.1's <\xef\xbd\x9cSystem\xef\xbd\x9c> marker (a V4 tokenizer): chats use the V4 template; "
                 "give the V4.1 checkpoint's tokenizer.json with --tokenizer for the V4.1 template");
    request_limits_t limits = {(size_t)max_prompt, (size_t)context, template_model};
    linereader_t lines;
    linereader_init(&lines, in_fd, (size_t)max_line);
    origin_t origin = {0};

    for (;;) {
        const char *line;
        size_t len;
        line_result_t r = linereader_next(&lines, &line, &len);
        if (r == LINE_END) break;
        if (r == LINE_ERROR) die("reading the input: %s", strerror(errno));
        uint64_t in_us = wall_us(), t0 = now_ns();
        if (r == LINE_OK && strspn(line, " \t\r\n\f\v") >= len) continue; /* blank: no request */
        char err[512];
        frame_t req;
        frame_init(&req, FRAME_REQUEST);
        req.seq = origin.n;
        const char *code = "bad_request";
        int rc = -1;
        if (r == LINE_TOO_LONG)
            snprintf(err, sizeof err, "the line has %zu bytes, more than --max-line-bytes %lld", len, (long long)max_line);
        else if (memchr(line, 0, len))
            snprintf(err, sizeof err, "the line contains a NUL byte");
        else
            rc = request_from_line(tok, &limits, line, len, req.seq, &req, err, sizeof err, &code);
        int64_t first = req.id ? origin_find(&origin, req.id) : -1;
        if (rc == 0 && first >= 0) {
            snprintf(err, sizeof err, "duplicate id '%s' (first used by request %lld)", req.id, (long long)first);
            rc = -1;
        }
        st.requests++;
        origin_add(&origin, req.id);
        if (rc == 0) {
            frame_add_hop(&req, STAGE, in_us, wall_us());
            frame_out_send(out, &req);
        } else {
            char message[700];
            snprintf(message, sizeof message, "line %llu: %s", (unsigned long long)lines.line_no, err);
            log_info("%s", message);
            send_error(out, &req, in_us, code, message, &st);
        }
        frame_free(&req);
        st.busy_ns += now_ns() - t0;
    }

    ledger_t ledger = origin_ledger(&origin, STAGE);
    const io_counters_t counters = *frame_out_counters(out);
    frame_out_finish(out, &ledger);
    io_shutdown();
    if (common.stats) stats_print(&st, NULL, &counters);

    origin_free(&origin);
    linereader_free(&lines);
    tokenizer_free(tok);
    if (in_fd != STDIN_FILENO) close(in_fd);
    return 0;
}
