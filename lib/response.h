/* One request's answer at the sink: token ids in, JSON lines out. Token ids go through
 * textstream (ids to UTF-8) and outparse (reasoning, answer, tool calls, stop strings); the
 * result is written in the shape the request came in (frame_meta_t.shape):
 *
 *   prompt: {"id", "text", "finish_reason", "usage"}
 *   chat:   {"id", "text", "reasoning_content" (thinking mode), "tool_calls" (when any),
 *            "finish_reason", "usage"}
 *   batch:  the OpenAI Batch API output line: {"id": "batch_req_<id>", "custom_id",
 *            "response": {"status_code": 200, "request_id", "body": <chat.completion>},
 *            "error": null}
 *
 * with "usage": {"prompt_tokens", "completion_tokens", "total_tokens"} and tool calls in
 * OpenAI's shape [{"id", "type": "function", "function": {"name", "arguments"}}].
 * Streaming adds delta lines {"id", "delta": {"content" | "reasoning_content" |
 * "tool_calls": [{"index", "id", "type", "function": {"name", "arguments"}} first, then
 * {"index", "function": {"arguments"}}]}}; concatenated, the deltas give the final line's
 * values. */
#ifndef DI_RESPONSE_H
#define DI_RESPONSE_H

#include "frame.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The model name a chat.completion reports when the request named none. */
#define RESPONSE_DEFAULT_MODEL "DeepSeek-V4.1-Flash"

typedef struct response response_t;

/* meta NULL means a prompt-shaped request without stop strings. */
response_t *response_new(const tokenizer_t *tok, const char *id, const frame_meta_t *meta);
void response_free(response_t *r);

/* Feeds output token ids. With delta non-NULL, *delta is set to a delta line for the text
 * this call released, or NULL when it released none. Returns 1 once a stop string has ended
 * the output (later ids are ignored), 0 otherwise, and -1 with the reason in err when an id
 * is outside the vocabulary (the request should then fail with an error line). */
int response_push(response_t *r, const uint32_t *ids, size_t n, json_t **delta, char *err, size_t errlen);

/* Ends the output and returns the final line. finish_reason is the generator's ("stop",
 * "length", ...); a stop string makes it "stop", and a chat answer that called tools and
 * stopped normally says "tool_calls". With delta non-NULL, *delta is set to a delta line for
 * text held back until the end (or NULL). */
json_t *response_finish(response_t *r, const char *finish_reason, uint64_t prompt_tokens, uint64_t completion_tokens,
                        json_t **delta);

/* The output line of a request that failed: {"id", "error": {"stage", "code", "message"}},
 * or for a batch request {"id": "batch_req_<id>", "custom_id", "response": null,
 * "error": {"code", "message"}}. id, meta, stage and code may be NULL. */
json_t *response_error_json(const char *id, const frame_meta_t *meta, const char *stage, const char *code,
                            const char *message);

#endif
