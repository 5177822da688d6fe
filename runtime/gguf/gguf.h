/* GGUF v2/v3 reader. The file is mmapped read-only; every count, length, offset and size is
 * checked against the file size with overflow-safe arithmetic before use, so a malformed or
 * hostile file yields EBB_EFORMAT (or EBB_EUNSUPPORTED) with a message, never a crash or an
 * allocation out of proportion to the file (the index is at most a few times the size of the
 * metadata it describes). All returned pointers stay valid until ebb_gguf_close(). */
#ifndef EBB_RUNTIME_GGUF_H
#define EBB_RUNTIME_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Metadata value types as stored in the file. */
enum ebb_gguf_vtype {
    EBB_GGUF_U8 = 0,
    EBB_GGUF_I8 = 1,
    EBB_GGUF_U16 = 2,
    EBB_GGUF_I16 = 3,
    EBB_GGUF_U32 = 4,
    EBB_GGUF_I32 = 5,
    EBB_GGUF_F32 = 6,
    EBB_GGUF_BOOL = 7,
    EBB_GGUF_STRING = 8,
    EBB_GGUF_ARRAY = 9,
    EBB_GGUF_U64 = 10,
    EBB_GGUF_I64 = 11,
    EBB_GGUF_F64 = 12,
};

/* Tensor element types (ggml numbering). */
enum ebb_ggml_type {
    EBB_GGML_F32 = 0,
    EBB_GGML_F16 = 1,
    EBB_GGML_Q4_0 = 2,
    EBB_GGML_Q4_1 = 3,
    EBB_GGML_Q5_0 = 6,
    EBB_GGML_Q5_1 = 7,
    EBB_GGML_Q8_0 = 8,
    EBB_GGML_Q8_1 = 9,
    EBB_GGML_Q2_K = 10,
    EBB_GGML_Q3_K = 11,
    EBB_GGML_Q4_K = 12,
    EBB_GGML_Q5_K = 13,
    EBB_GGML_Q6_K = 14,
    EBB_GGML_Q8_K = 15,
    EBB_GGML_BF16 = 30,
};

/* Facts about one tensor type: elements per block and bytes per block. */
struct ebb_ggml_type_info {
    const char *name; /* "Q4_1" */
    uint32_t block_size;
    uint32_t type_size;
};

/* Returns the table entry for a ggml type id, or NULL for a type ebb does not know. */
const struct ebb_ggml_type_info *ebb_ggml_type_info(uint32_t type);

/* Returns the ggml name of any ggml type id ebb knows of, supported or not ("IQ2_XXS"), or NULL
 * for an id it has never heard of. */
const char *ebb_ggml_type_name(uint32_t type);

/* Returns the short name of a metadata value type ("u32", "string", "array"), or "?". */
const char *ebb_gguf_vtype_name(uint32_t type);

/* Bytes of a row of n elements of type; EBB_EFORMAT if n is not a whole number of blocks or the
 * type is unknown, EBB_EOVERFLOW on overflow. */
ebb_err ebb_ggml_row_bytes(uint32_t type, uint64_t n, uint64_t *out);

/* A string inside the mapped file: not NUL-terminated. */
struct ebb_str {
    const char *p;
    uint64_t n;
};

/* An array value. Fixed-size elements are stored little-endian and possibly unaligned at
 * `data`; read them with the accessors below. */
struct ebb_gguf_arr {
    enum ebb_gguf_vtype type; /* element type */
    uint64_t n;               /* element count */
    const uint8_t *data;      /* first element */
    const void *priv;         /* reader-internal index for string and nested arrays */
};

struct ebb_gguf_tensor {
    const char *name; /* NUL-terminated copy */
    uint32_t n_dims;  /* 1..4 */
    uint64_t ne[4];   /* elements per dimension, ne[0] fastest; unused dims are 1 */
    uint32_t type;    /* enum ebb_ggml_type */
    uint64_t offset;  /* from the start of the data section */
    uint64_t size;    /* bytes */
    uint64_t n_elements;
    const void *data; /* inside the mapping */
};

struct ebb_gguf;

/* Maps and parses a GGUF file. On failure *out is untouched and diag names the problem
 * ("tensor 'blk.0.attn_q.weight' lies past the end of the file", ...). */
ebb_err ebb_gguf_open(const char *path, struct ebb_gguf **out, struct ebb_diag *diag);

/* Parses a GGUF image already in memory (tests, fuzzing). The caller keeps `data` alive and
 * unchanged until ebb_gguf_close(). */
ebb_err ebb_gguf_open_mem(const void *data, size_t size, struct ebb_gguf **out,
                          struct ebb_diag *diag);

/* Unmaps and frees; accepts NULL. */
void ebb_gguf_close(struct ebb_gguf *g);

uint32_t ebb_gguf_version(const struct ebb_gguf *g);
const void *ebb_gguf_base(const struct ebb_gguf *g); /* first byte of the file */
uint64_t ebb_gguf_file_size(const struct ebb_gguf *g);
uint64_t ebb_gguf_data_offset(const struct ebb_gguf *g); /* start of the data section */
uint32_t ebb_gguf_alignment(const struct ebb_gguf *g);
/* Files the model was opened from: 1, or a split model's part count. The image (base, file
 * size, tensor offsets) then spans the parts mapped one after the other, which no single
 * file's offsets match (docs/GGUF.md). */
uint32_t ebb_gguf_n_files(const struct ebb_gguf *g);

/* Metadata, by index (0..n_kv-1) or by key. */
uint64_t ebb_gguf_n_kv(const struct ebb_gguf *g);
/* Keys are non-empty and hold no control bytes (NUL included). NULL if i >= n_kv. */
const char *ebb_gguf_kv_key(const struct ebb_gguf *g, uint64_t i); /* NUL-terminated copy */
/* (enum ebb_gguf_vtype)-1 if i >= n_kv. */
enum ebb_gguf_vtype ebb_gguf_kv_type(const struct ebb_gguf *g, uint64_t i);
/* Index of key or -1. */
int64_t ebb_gguf_find_kv(const struct ebb_gguf *g, const char *key);

/* Typed getters by key. Integers convert between integer types when the value fits
 * (EBB_ERANGE otherwise); floats accept F32 and F64. EBB_ENOTFOUND if the key is absent,
 * EBB_EINVAL if the stored type does not convert. *out is written only on success. */
ebb_err ebb_gguf_get_u32(const struct ebb_gguf *g, const char *key, uint32_t *out);
ebb_err ebb_gguf_get_i64(const struct ebb_gguf *g, const char *key, int64_t *out);
ebb_err ebb_gguf_get_f32(const struct ebb_gguf *g, const char *key, float *out);
ebb_err ebb_gguf_get_bool(const struct ebb_gguf *g, const char *key, bool *out);
ebb_err ebb_gguf_get_str(const struct ebb_gguf *g, const char *key, struct ebb_str *out);
ebb_err ebb_gguf_get_arr(const struct ebb_gguf *g, const char *key, struct ebb_gguf_arr *out);
/* Same by index. */
ebb_err ebb_gguf_kv_str(const struct ebb_gguf *g, uint64_t i, struct ebb_str *out);
ebb_err ebb_gguf_kv_arr(const struct ebb_gguf *g, uint64_t i, struct ebb_gguf_arr *out);
/* Any non-negative integer value as u64 (EBB_ERANGE if negative, EBB_EINVAL if not an integer;
 * EBB_ERANGE also for i >= n_kv). */
ebb_err ebb_gguf_kv_u64(const struct ebb_gguf *g, uint64_t i, uint64_t *out);

/* Array element accessors; i must be < arr->n (checked: EBB_ERANGE). Numeric accessors convert
 * from any numeric element type. */
ebb_err ebb_gguf_arr_f32(const struct ebb_gguf_arr *a, uint64_t i, float *out);
ebb_err ebb_gguf_arr_i64(const struct ebb_gguf_arr *a, uint64_t i, int64_t *out);
ebb_err ebb_gguf_arr_str(const struct ebb_gguf_arr *a, uint64_t i, struct ebb_str *out);
ebb_err ebb_gguf_arr_sub(const struct ebb_gguf_arr *a, uint64_t i, struct ebb_gguf_arr *out);

/* Tensors, in file order. Each has a known type, every ne >= 1, ne[0] a whole number of blocks,
 * an aligned offset, and lies inside the file without overlapping another. NULL if i is out of
 * range. */
uint64_t ebb_gguf_n_tensors(const struct ebb_gguf *g);
const struct ebb_gguf_tensor *ebb_gguf_tensor_at(const struct ebb_gguf *g, uint64_t i);
/* Returns NULL if absent. */
const struct ebb_gguf_tensor *ebb_gguf_find_tensor(const struct ebb_gguf *g, const char *name);

#endif
