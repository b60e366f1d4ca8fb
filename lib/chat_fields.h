/* Reading a request's JSON fields with recipe's types: a wrong type is an error, null is
 * "absent", unknown fields are ignored. Errors go to a caller's buffer through chat_ctx_t. */
#ifndef DI_CHAT_FIELDS_H
#define DI_CHAT_FIELDS_H

#include "util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char *err;
    size_t errlen;
} chat_ctx_t;

/* Writes the message and returns -1. A character cut by the buffer's end is dropped. */
int chat_fail(chat_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *chat_type_name(const json_t *v);
/* A field, or NULL when it is absent or null. */
const json_t *chat_field(const json_t *obj, const char *key);
void chat_set_buf(buf_t *b, const json_t *string);
json_t *chat_json_buf(const buf_t *b);
bool chat_same(const buf_t *a, const buf_t *b);

int chat_want_string(chat_ctx_t *c, const json_t *v, const char *what);
/* Optional fields: 0 absent, 1 present (*out set), -1 error. chat_opt_bool returns 0 either way. */
int chat_opt_bool(chat_ctx_t *c, const json_t *obj, const char *key, const char *what, bool *out);
int chat_opt_uint(chat_ctx_t *c, const json_t *obj, const char *key, uint64_t max, uint64_t *out);
int chat_opt_f32(chat_ctx_t *c, const json_t *obj, const char *key, double *out);

/* The index of v's name in names, or -1 (error set). map_ok: recipe's field is an external
 * enum, which also accepts {"name": null}. */
int chat_enum_value(chat_ctx_t *c, const json_t *v, const char *what, const char *const *names, size_t n, bool map_ok);
/* "function", or {"function": null}: the tag of tools and tool calls. */
bool chat_is_function_tag(const json_t *type);

#endif
