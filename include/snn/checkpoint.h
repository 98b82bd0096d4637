/* snn — checkpoints in the safetensors format (docs/checkpoint-format.md).
 *
 * A file is: 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the tensor bytes (offsets relative to the end of the header). Python opens it with
 * safetensors, or with json + numpy. Nothing executable is stored or loaded.
 *
 * Writing is atomic (temporary file, fsync, rename, fsync of the directory). Reading
 * validates everything: a truncated, corrupt or hostile file is SNN_E_FORMAT with a
 * message naming the file and the problem, never a crash or a huge allocation. */
#ifndef SNN_CHECKPOINT_H
#define SNN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, named as safetensors names them ("F32", "BF16", "F8_E4M3", ...). */
typedef enum snn_ckpt_dtype {
    SNN_CKPT_F32 = 0,
    SNN_CKPT_F16,
    SNN_CKPT_BF16,
    SNN_CKPT_U8,
    SNN_CKPT_I32,
    SNN_CKPT_F64,
    SNN_CKPT_I8,
    SNN_CKPT_I16,
    SNN_CKPT_I64,
    SNN_CKPT_U16,
    SNN_CKPT_U32,
    SNN_CKPT_U64,
    SNN_CKPT_BOOL,
    SNN_CKPT_F8_E4M3,
    SNN_CKPT_F8_E5M2,
    SNN_CKPT_F8_E8M0,
    SNN_CKPT_DTYPE_COUNT
} snn_ckpt_dtype;

#define SNN_CKPT_MAX_RANK 8
/* Largest JSON header accepted on reading (and written). */
#define SNN_CKPT_MAX_HEADER ((uint64_t)100 << 20)

const char *snn_ckpt_dtype_name(snn_ckpt_dtype t);  /* "F32"; NULL when unknown */
size_t snn_ckpt_dtype_size(snn_ckpt_dtype t);       /* bytes per element; 0 when unknown */
snn_status snn_ckpt_dtype_from_name(const char *name, snn_ckpt_dtype *out);

/* ---- writing ---- */
typedef struct snn_ckpt_writer snn_ckpt_writer;

snn_status snn_ckpt_writer_begin(snn_ckpt_writer **out);
/* Copy a tensor into the writer. Names are unique, non-empty and not "__metadata__";
 * rank 0..SNN_CKPT_MAX_RANK (rank 0: a scalar). data holds numel * dtype-size bytes
 * (NULL allowed when numel is 0). */
snn_status snn_ckpt_writer_add_tensor(snn_ckpt_writer *w, const char *name, snn_ckpt_dtype dtype,
                                      int rank, const int64_t *shape, const void *data);
/* A metadata string pair; keys are unique. */
snn_status snn_ckpt_writer_add_metadata(snn_ckpt_writer *w, const char *key, const char *value);
/* Write everything to path atomically: "<path>.tmp.<pid>", fflush, fsync, rename, fsync
 * of the directory. The writer stays valid (commit may be retried); free it after. */
snn_status snn_ckpt_writer_commit(snn_ckpt_writer *w, const char *path);
void snn_ckpt_writer_free(snn_ckpt_writer *w);

/* ---- reading ---- */
typedef struct snn_ckpt snn_ckpt;

typedef struct snn_ckpt_tensor {
    const char *name;
    snn_ckpt_dtype dtype;
    int rank;
    int64_t shape[SNN_CKPT_MAX_RANK];
    size_t numel;
    size_t nbytes;
    const void *data;  /* inside the checkpoint's buffer; may be unaligned: memcpy it */
} snn_ckpt_tensor;

/* Read and validate a whole file (one allocation of the file's size). */
snn_status snn_ckpt_open(const char *path, snn_ckpt **out);
/* Validate a buffer (copied); name is used in messages. */
snn_status snn_ckpt_open_memory(const void *buf, size_t len, const char *name, snn_ckpt **out);
void snn_ckpt_close(snn_ckpt *c);

const char *snn_ckpt_path(const snn_ckpt *c);
/* Tensors in the order of their data (ascending offsets). */
size_t snn_ckpt_num_tensors(const snn_ckpt *c);
snn_status snn_ckpt_tensor_at(const snn_ckpt *c, size_t i, snn_ckpt_tensor *t);
/* SNN_E_INVALID (message names the file) when there is no tensor of that name. */
snn_status snn_ckpt_find(const snn_ckpt *c, const char *name, snn_ckpt_tensor *t);
int snn_ckpt_has(const snn_ckpt *c, const char *name);
/* Copy tensor `name` into dst: its dtype must be `dtype` and dst_bytes its exact size
 * (SNN_E_SHAPE otherwise, saying what the file holds). */
snn_status snn_ckpt_read(const snn_ckpt *c, const char *name, snn_ckpt_dtype dtype, void *dst,
                         size_t dst_bytes);
/* Metadata value of key, or NULL. */
const char *snn_ckpt_metadata(const snn_ckpt *c, const char *key);
size_t snn_ckpt_num_metadata(const snn_ckpt *c);
snn_status snn_ckpt_metadata_at(const snn_ckpt *c, size_t i, const char **key, const char **value);

/* ---- models ---- */
/* Save every tensor of snn_model_tensor() as F32 with metadata
 * {"format": "snn-checkpoint-v1", "snn_model_config": <config JSON>, "snn_model_kind": ..,
 *  "snn_version": ..} plus the NULL-terminated key, value pairs of meta_kv (may be NULL;
 * the keys above are reserved). */
snn_status snn_model_save(const snn_model *m, const char *path, const char *const *meta_kv);
/* Copy the checkpoint's tensors into an existing model: every model tensor must be present
 * as F32 with the same shape (SNN_E_FORMAT otherwise); extra tensors in the file (optimizer
 * or precision state) are ignored. A NaN or infinite value is refused (SNN_E_NUMERIC). All
 * is checked before anything is copied: on error the model is unchanged. */
snn_status snn_model_load_weights(snn_model *m, const snn_ckpt *ckpt);
/* Rebuild the model from its "snn_model_config" metadata, then load its weights.
 * ckpt_out (optional) receives the open checkpoint for further tensors/metadata; the
 * caller closes it. */
snn_status snn_model_load(const char *path, uint64_t seed, snn_model **out, snn_ckpt **ckpt_out);
/* The same from an open checkpoint (snn_ckpt_open_memory, for instance). Before the model
 * is allocated, the tensors its configuration needs are matched against the header (names,
 * F32, shapes, and in all no more bytes than the file holds); the weights are refused when
 * any value is NaN or infinite (SNN_E_NUMERIC). */
snn_status snn_model_from_checkpoint(const snn_ckpt *c, uint64_t seed, snn_model **out);

#ifdef __cplusplus
}
#endif
#endif
