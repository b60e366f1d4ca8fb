/* Shared by the JSON-schema front end's files (grammar_schema*.c). */
#ifndef DI_GRAMMAR_SCHEMA_H
#define DI_GRAMMAR_SCHEMA_H

#include "grammar_internal.h"

#include <jansson.h>

#define SCHEMA_MAX_DEPTH 128  /* schema nodes being expanded at once */

typedef struct {
    const json_t *node;
    uint32_t rule;
} sc_rule_t;

typedef struct {
    gctx_t *c;
    json_t *root;
    rules_t *rules;
    const json_t *stack[SCHEMA_MAX_DEPTH];  /* nodes being expanded: meeting one again is recursion */
    uint32_t depth;
    sc_rule_t *rmap;                        /* recursive nodes and their rules */
    uint32_t n_rmap;
    uint32_t any_rule;                      /* "any JSON value", G_NONE until needed */
    json_t *keep;                           /* schemas made while compiling (merges), kept alive */
    uint32_t merge_depth;
} sc_t;

ast_t *schema_node(sc_t *s, const json_t *node);
ast_t *schema_any_value(sc_t *s);
const json_t *schema_resolve(sc_t *s, const char *ref);
bool schema_is_annotation(const char *key);
/* Type bits (grammar_schema.c): what "type" allows, what a value is. */
int schema_types(sc_t *s, const json_t *node);
int schema_value_type(const json_t *v);

/* grammar_schema_merge.c */
/* JSON equality as validators see it: 1 == 1.0, but true != 1. */
bool schema_values_equal(const json_t *a, const json_t *b);
/* A copy of node without key (new reference). */
json_t *schema_without(const json_t *node, const char *key);
/* One schema meaning allOf[a, b], or NULL with an error where that cannot be exact. */
json_t *schema_merge(sc_t *s, const json_t *a, const json_t *b);
/* node with its allOf merged in (new reference), or NULL with an error. */
json_t *schema_flatten_all_of(sc_t *s, const json_t *node);
/* oneOf branches that no value can match twice; false with an error otherwise. */
bool schema_check_exclusive(sc_t *s, const json_t *branches);

#endif
