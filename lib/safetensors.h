/* Safetensors checkpoints, memory-mapped: one file, or a sharded set described by
 * model.safetensors.index.json. Every header is validated with bounded reads before a tensor is
 * exposed: the length prefix against the file size, the JSON size against ST_MAX_HEADER, every
 * tensor's dtype, shape and data_offsets against the data region (no overflow, no overlap), and
 * for a sharded set the index against the shards. A hostile file gives an error, never an
 * out-of-bounds read.
 *
 * File layout (safetensors): u64 little-endian N, N bytes of JSON {name: {"dtype": "F32",
 * "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}, then the data region;
 * offsets are relative to the data region's start. Tensor data is not necessarily aligned:
 * read it through memcpy (dequant.h does). */
#ifndef DI_SAFETENSORS_H
#define DI_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS   8
#define ST_MAX_HEADER (100u << 20) /* bytes of JSON in one file's header */
#define ST_MAX_INDEX  (64u << 20)  /* bytes of model.safetensors.index.json */
#define ST_MAX_SHARDS 4096         /* files one index may name */

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_F16, ST_BF16, ST_U32, ST_I32, ST_F32,
    ST_U64, ST_I64, ST_F64, ST_F8_E4M3, ST_F8_E5M2, ST_F8_E8M0,
    ST_DTYPE_COUNT
} st_dtype_t;

/* The on-disk spelling ("BF16", "F8_E4M3", ...) and the element size in bytes. */
const char *st_dtype_name(st_dtype_t t);
size_t st_dtype_size(st_dtype_t t);
/* -1 if the spelling is not a known dtype. */
int st_dtype_parse(const char *name);

typedef struct {
    const char *name;
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    const uint8_t *data; /* inside the mapping, nbytes long, any alignment */
    size_t nbytes;
    int shard;           /* which file of the archive holds it */
} st_tensor_t;

typedef struct st_archive st_archive_t;

/* Opens a checkpoint. path is a .safetensors file, an index .json, or a directory (its
 * model.safetensors.index.json if present, else its model.safetensors). NULL on failure, with
 * a reason naming the file and the problem in err. */
st_archive_t *st_open(const char *path, char *err, size_t errlen);

/* Parses a safetensors image already in memory (not copied: it must outlive the archive).
 * label names it in error messages. For tests and the fuzzer. */
st_archive_t *st_from_memory(const uint8_t *image, size_t len, const char *label, char *err, size_t errlen);

void st_close(st_archive_t *a);

/* Tensors sorted by name; st_find is a binary search. */
size_t st_count(const st_archive_t *a);
const st_tensor_t *st_tensor_at(const st_archive_t *a, size_t i);
const st_tensor_t *st_find(const st_archive_t *a, const char *name);

int st_shard_count(const st_archive_t *a);

#endif
