/* One JSONL input line -> one request ready for the model. Three shapes are accepted:
 *
 *   {"id", "prompt": "text" | [ids], sampling fields...}          raw completion
 *   {"id", "messages": [...], "tools", "thinking", ...}            OpenAI Chat Completions body
 *   {"custom_id", "method": "POST", "url", "body": {...}}          OpenAI Batch API line
 *
 * Chat bodies are converted and rendered as the official renderer does (chat.h), with the
 * template the deployment serves whatever model name the body gives (the name is kept for
 * the answer); raw prompts are tokenized as written, added/special tokens included, no BOS. */
#ifndef DI_REQUEST_H
#define DI_REQUEST_H

#include "frame.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t max_prompt_tokens;  /* longer prompts are refused */
    size_t context_length;     /* for recipe's default max_tokens of chat requests */
    const char *template_model; /* the chat template served: "DeepSeek-V4.1-Flash" or "DeepSeek-V4-Pro" */
} request_limits_t;

/* The chat template a deployment serves: V4.1's when the tokenizer has every V4.1 turn
 * marker, else V4's (the V4 tokenizer file lacks V4.1's "<｜System｜>"). "auto", "v41" or
 * "v4"; returns the template's model name, or NULL for an unknown choice. */
const char *request_template_model(const tokenizer_t *tok, const char *choice);

/* Parses, renders and tokenizes one line. On success fills a REQUEST frame (id, seq,
 * prompt, params, constraint, meta) and returns 0. On failure returns -1 with the reason in
 * err, the error class in *code ("bad_request" or "context_length") and, when the line told
 * its id, f->id and f->meta set so the error can name the request. */
int request_from_line(const tokenizer_t *tok, const request_limits_t *limits, const char *line, size_t len,
                      uint64_t seq, frame_t *f, char *err, size_t errlen, const char **code);

#endif
