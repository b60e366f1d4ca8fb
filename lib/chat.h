/* Chat Completions request -> DeepSeek V4 / V4.1 prompt, as the official renderer
 * (deepseek-recipe) does it: the request is validated and converted the way recipe's
 * ChatCompletionRequest.convert() does (same requests rejected, same defaults), then the
 * conversation is rendered byte for byte like DeepseekV41Encoding / DeepseekV4Encoding.
 * The model name picks the encoding: "DeepSeek-V4.1-Flash" -> V4.1, "DeepSeek-V4-Pro" -> V4.
 *
 * The prompt is plain text plus the byte ranges of explicit special tokens. Only the
 * template's control tokens (and grounding tokens inside assistant history) are special;
 * every other byte, including a special-token spelling typed by a user, is plain text that
 * chat_encode tokenizes without the added vocabulary. Images are refused (text-only engine). */
#ifndef DI_CHAT_H
#define DI_CHAT_H

#include "tokenizer.h"
#include "util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CHAT_MODEL_V4, CHAT_MODEL_V41 } chat_model_t;

/* Where the output parser starts (recipe's ThinkingInitialStage; NONE outside thinking mode). */
typedef enum {
    CHAT_STAGE_NONE,
    CHAT_STAGE_REASONING_START,        /* a new turn: reasoning first */
    CHAT_STAGE_REASONING_CONTINUATION, /* prefix continuation inside reasoning */
    CHAT_STAGE_CONTENT_CONTINUATION,   /* prefix continuation after the reasoning ended */
} chat_stage_t;

/* What constrained decoding would enforce (recipe's OutputConstraint kinds). */
typedef enum {
    CHAT_CONSTRAINT_NONE,
    CHAT_CONSTRAINT_JSON,               /* text: compact JSON Schema, "" = any JSON value */
    CHAT_CONSTRAINT_REGEX,              /* text: the regular expression */
    CHAT_CONSTRAINT_TOOL_CALL,          /* text: compact JSON array of the function tools */
    CHAT_CONSTRAINT_TOOL_CALL_REQUIRED, /* same, and the prompt already opened the call block */
} chat_constraint_t;

typedef struct {
    size_t start, end; /* byte offsets into text: one special token's spelling */
} chat_span_t;

typedef struct {
    chat_model_t model;
    buf_t text;          /* the prompt (UTF-8, may hold NUL bytes from the request) */
    chat_span_t *special; /* ascending, disjoint */
    size_t n_special, cap_special;

    /* Parsing options. */
    bool thinking;             /* thinking mode */
    chat_stage_t stage;        /* NONE iff !thinking */
    bool tools;                /* parse tool-call markup in the output */
    bool starts_in_tool_calls; /* the prompt ends inside an opened tool-call block */
    bool parse_json_output;    /* response_format json_object */
    buf_t *stop;               /* stop sequences */
    size_t n_stop;

    /* Inference options. */
    double temperature, top_p; /* resolved values (float32 precision, like recipe) */
    int64_t max_tokens;        /* -1: not requested; see chat_resolve_max_tokens */
    bool has_seed;
    uint64_t seed;
    bool logprobs;
    int top_logprobs;          /* -1: not requested */
    bool stream;
    chat_constraint_t constraint;
    buf_t constraint_text;
    bool max_effort;           /* thinking with reasoning_effort max: the larger default budget */
} chat_prompt_t;

/* Validates and renders one request body. 0 on success; -1 with a message in err when the
 * request is one recipe rejects (or holds images). out is always safe to free. */
int chat_render(const json_t *body, chat_prompt_t *out, char *err, size_t errlen);

/* Special spans become their added-token ids (error if the tokenizer lacks one), the text
 * between them is encoded as plain text. Appends to out. */
int chat_encode(const tokenizer_t *tok, const chat_prompt_t *p, ids_t *out, char *err, size_t errlen);

/* recipe's resolve_max_tokens: a requested max_tokens is kept, else 8192 (no thinking),
 * 131072 (thinking, effort max) or 65536; lowered to the context left, at least 1. Error if
 * the prompt plus the requested max_tokens (or the prompt alone) exceeds the context. */
int chat_resolve_max_tokens(const chat_prompt_t *p, size_t prompt_tokens, size_t context_limit,
                            int64_t *out, char *err, size_t errlen);

void chat_prompt_free(chat_prompt_t *p);

#endif
