/* Frames: the unit every stage reads and writes. One msgpack map per frame; docs/PROTOCOL.md
 * is the normative description, this is its C form. A frame_t owns everything it points to. */
#ifndef DI_FRAME_H
#define DI_FRAME_H

#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_VERSION 1

/* Bounds applied while decoding; anything larger is a malformed frame. */
#define FRAME_MAX_BYTES      (1u << 30)   /* one frame on the wire (state frames are the big ones) */
#define FRAME_MAX_TOKENS     (16u << 20)  /* token ids in one frame */
#define FRAME_MAX_STRING     (64u << 20)  /* one string field */
#define FRAME_MAX_HOPS       64           /* trace entries */
#define FRAME_MAX_STOPS      16           /* stop strings per request */
#define FRAME_MAX_TOP        32           /* top logprobs per token */
#define FRAME_MAX_IDS        (4u << 20)   /* request ids listed in an eos ledger */
#define FRAME_MAX_DEPTH      32           /* msgpack nesting */

typedef enum {
    FRAME_REQUEST = 1, /* a request ready for the model: prompt ids and parameters */
    FRAME_STATE,       /* a prefilled request: its sequence state and first token, for decode */
    FRAME_TOKENS,      /* new output token ids for one request */
    FRAME_DONE,        /* a request finished; usage */
    FRAME_ERROR,       /* a request failed at some stage; its only remaining frame */
    FRAME_EOS,         /* end of stream, with the ledger of what was announced */
} frame_type_t;

#define FRAME_TYPE_LAST FRAME_EOS

const char *frame_type_name(frame_type_t t);

/* One stage a frame passed: wall-clock microseconds when the stage read it and wrote it. */
typedef struct {
    char *stage;
    uint64_t in_us, out_us;
} frame_hop_t;

/* Sampling parameters. A field the request did not set keeps its "unset" value and the
 * stage that samples applies its default. */
typedef struct {
    int64_t max_tokens;   /* -1: unset */
    double temperature;   /* < 0: unset */
    double top_p;         /* < 0: unset */
    double min_p;         /* < 0: unset */
    int64_t top_k;        /* -1: unset */
    bool has_seed;
    uint64_t seed;
    bool logprobs;
    int64_t top_logprobs; /* 0..FRAME_MAX_TOP */
    uint32_t *stop_ids;   /* stop token ids */
    uint32_t n_stop_ids;
} frame_params_t;

typedef enum { CONSTRAINT_NONE = 0, CONSTRAINT_JSON_OBJECT, CONSTRAINT_JSON_SCHEMA, CONSTRAINT_REGEX } constraint_kind_t;

const char *constraint_kind_name(constraint_kind_t k);

typedef struct {
    constraint_kind_t kind;
    char *text; /* the schema as compact JSON, or the regex; NULL for json_object */
    bool has_hash;
    uint64_t hash; /* set by di-grammar: grammar_key() of the validated, canonical text */
} frame_constraint_t;

typedef enum { SHAPE_PROMPT = 0, SHAPE_CHAT, SHAPE_BATCH } request_shape_t;

const char *request_shape_name(request_shape_t s);

/* What the sink needs to write the answer: it travels with the request and is attached to
 * the first frame a producer emits for that request towards the sink. */
typedef struct {
    request_shape_t shape;
    char *custom_id;       /* batch lines: the caller's custom_id */
    char *model;           /* model name as the caller wrote it, or NULL */
    bool thinking;         /* generation starts inside the reasoning block */
    bool continuation;     /* the prompt continues an assistant prefix: leading newlines kept */
    bool tools;            /* the request declared tools: parse DSML tool calls */
    bool in_tool_calls;    /* the prompt opened the tool-call block (tool_choice required) */
    bool parse_json;       /* response_format asked for JSON */
    char **stop;           /* stop strings, applied to the text */
    uint32_t n_stop;
    uint64_t prompt_tokens;
} frame_meta_t;

typedef struct {
    float logprob;         /* of the chosen token */
    uint32_t n_top;
    uint32_t top_ids[FRAME_MAX_TOP];
    float top_logprobs[FRAME_MAX_TOP];
} frame_logprob_t;

/* The ledger an end-of-stream frame carries (see PROTOCOL.md, "End of stream"). */
typedef struct {
    char *sender;          /* unique id of the stage instance that wrote this eos */
    char *origin;          /* unique id of the source that numbered the requests */
    uint64_t announced;    /* requests the origin emitted */
    uint64_t served;       /* requests whose terminal frame this sender emitted */
    char **ids;            /* the origin's request ids in seq order (may be absent) */
    uint64_t n_ids;
} frame_eos_t;

typedef struct {
    frame_type_t type;
    char *id;              /* request id (all types but EOS) */
    uint64_t seq;          /* position of the request in the origin's input */
    frame_hop_t *hops;
    uint32_t n_hops;

    /* REQUEST and STATE */
    uint32_t *tokens;      /* REQUEST: prompt ids; STATE and TOKENS: new output ids */
    uint32_t n_tokens;
    frame_params_t params;
    frame_constraint_t constraint;
    bool has_meta;         /* REQUEST and STATE always; TOKENS/DONE/ERROR when attached */
    frame_meta_t meta;

    /* STATE: the serialized sequence state (seqstate_io.h, docs/STATE.md) */
    uint8_t *state;
    uint64_t state_len;

    /* TOKENS (and STATE) */
    frame_logprob_t *logprobs; /* NULL or n_tokens entries */

    /* DONE */
    char *finish_reason;   /* "stop", "length", ... */
    uint64_t prompt_tokens, completion_tokens;

    /* ERROR */
    char *stage;           /* which stage failed the request */
    char *code;            /* short machine-readable class, e.g. "bad_request" */
    char *message;         /* human-readable reason */

    /* EOS */
    frame_eos_t eos;
} frame_t;

/* A zeroed frame of the given type with every "unset" parameter marker in place. */
void frame_init(frame_t *f, frame_type_t type);
void frame_free(frame_t *f);

void frame_params_init(frame_params_t *p);
void frame_meta_copy(frame_meta_t *dst, const frame_meta_t *src);
void frame_meta_free(frame_meta_t *m);

/* Append a trace hop for `stage` (times in wall-clock microseconds). */
void frame_add_hop(frame_t *f, const char *stage, uint64_t in_us, uint64_t out_us);

/* An ERROR frame for request `id` (may be NULL when the id is unknown). */
void frame_make_error(frame_t *f, const char *id, uint64_t seq, const char *stage, const char *code,
                      const char *message);

/* Serialises f as one msgpack map appended to out. */
void frame_encode(const frame_t *f, buf_t *out);

/* Decodes exactly one frame from data[0..len). Returns 0 on success; -1 on a malformed or
 * invalid frame, with a message naming what was wrong in err. On failure f is left freed;
 * if the frame's id and seq could be read they are left in *id_out and *seq_out (id_out may be
 * NULL; the caller frees *id_out) so the caller can fail just that request. */
int frame_decode(const uint8_t *data, size_t len, frame_t *f, char **id_out, uint64_t *seq_out, char *err,
                 size_t errlen);

/* Length of the first complete msgpack object at data[0..len): >0 its length, 0 when more
 * bytes are needed, -1 when the bytes cannot be msgpack within the bounds above (err set). */
int64_t frame_wire_length(const uint8_t *data, size_t len, char *err, size_t errlen);

#endif
