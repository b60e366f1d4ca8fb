/* Writing safetensors checkpoints: one file, or N shards plus model.safetensors.index.json
 * (the layout st_open reads). Tensors are written in the order they were added; the header is
 * padded with spaces so that the data region starts 8-byte aligned. */
#ifndef DI_SAFETENSORS_WRITE_H
#define DI_SAFETENSORS_WRITE_H

#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>

typedef struct st_writer st_writer_t;

st_writer_t *stw_new(void);
/* Adds a tensor; the writer takes ownership of data (malloc'd, nbytes long, which must match
 * the dtype and shape). */
void stw_add(st_writer_t *w, const char *name, st_dtype_t dtype, int ndim, const int64_t *shape, void *data, size_t nbytes);
/* shards <= 1: dir/model.safetensors. Otherwise dir/model-0000k-of-0000N.safetensors with the
 * tensors split in order into runs of about equal bytes (N is capped at the tensor count), and
 * dir/model.safetensors.index.json.
 * 0, or -1 with err. */
int stw_write(st_writer_t *w, const char *dir, int shards, char *err, size_t errlen);
void stw_free(st_writer_t *w);

#endif
