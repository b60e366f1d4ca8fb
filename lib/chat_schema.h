/* JSON Schemas in requests: recipe checks tool parameter schemas and response schemas
 * against the JSON Schema meta-schema, and rewrites the schema of a strict tool or strict
 * response format into OpenAI's strict subset (every object closed, every property required). */
#ifndef DI_CHAT_SCHEMA_H
#define DI_CHAT_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Is schema a valid JSON Schema (draft 2020-12 unless its $schema names another draft)?
 * On failure err says why. */
bool chat_schema_valid(const json_t *schema, char *err, size_t errlen);

/* The strict form of schema (a new reference), or NULL with the reason in err. The top
 * level must be an object; tool parameters may have no properties there. */
json_t *chat_schema_strict(const json_t *schema, bool tool_parameters, char *err, size_t errlen);

#endif
