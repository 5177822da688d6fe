/* Pack files: a model's weights regrouped per decoder layer for streaming (`ebb pack`).
 *
 * Layout (little-endian): a 4 KiB header (magic "EBBPACK1", the source model's name, file size
 * and a hash of its GGUF metadata, the weight layout name and the device kind the pack was made
 * for), a directory (one record per group: decoder layers 0..n_layer-1, then one group of the
 * always-resident tensors; one entry per tensor), then the groups, each starting on a 4 KiB
 * boundary. A group is its tensors' bytes in a fixed order (attn_norm, attn_q, attn_k, attn_v,
 * attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then any other tensor of the layer in file
 * order), each tensor 256-byte aligned inside the group; stored either raw or as one zstd frame
 * (kept only where it is at least 10% smaller), with an ebb_hash64 checksum of the stored bytes
 * that every read verifies. Layout "gguf-raw" keeps the GGUF tensor bytes unchanged. */
#ifndef EBB_RUNTIME_PACK_H
#define EBB_RUNTIME_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "stream-io.h"

#define EBB_PACK_LAYOUT_GGUF_RAW "gguf-raw"
#define EBB_PACK_TENSOR_ALIGN 256u

/* A 64-bit non-cryptographic hash (the XXH64 algorithm, our own implementation). */
uint64_t ebb_hash64(const void *data, size_t n, uint64_t seed);

/* The extent of each decoder layer's tensors ("blk.N.*") inside a GGUF file, as one
 * contiguous region from the first to the last byte of the layer's tensors (GGUF writers group
 * a layer's tensors together; a layer whose span is more than twice its tensors' bytes is
 * EBB_EUNSUPPORTED). out has n_layer entries; n_layer comes from ebb_pack_gguf_n_layer. */
ebb_err ebb_pack_gguf_extents(const struct ebb_gguf *g, uint32_t n_layer,
                              struct ebb_stream_layer *out, struct ebb_diag *diag);

/* The number of decoder layers: <arch>.block_count, checked against the "blk.N." names. */
ebb_err ebb_pack_gguf_n_layer(const struct ebb_gguf *g, uint32_t *out, struct ebb_diag *diag);

/* What a pack must match to be used with a model. NULL strings and zero numbers are not
 * checked. */
struct ebb_pack_expect {
    uint64_t model_size;
    uint64_t meta_hash;
    const char *layout;
    const char *device_kind;
};

/* The identity of a GGUF file: its size and the hash of its header and metadata (every byte
 * before the data section). */
void ebb_pack_expect_from_gguf(const struct ebb_gguf *g, struct ebb_pack_expect *out);

/* The engine's rewrite of tensors into its device layout, so that a pack holds exactly the
 * bytes the device buffers need (no conversion when streaming). size() returns a tensor's bytes
 * in the layout, 0 to store it unchanged; convert() writes those bytes to dst. Both are called
 * from the writing thread only. */
struct ebb_pack_convert_i {
    uint64_t (*size)(void *ctx, const struct ebb_gguf_tensor *t);
    ebb_err (*convert)(void *ctx, const struct ebb_gguf_tensor *t, void *dst,
                       struct ebb_diag *diag);
};

struct ebb_pack_write_opts {
    const char *layout;      /* NULL = "gguf-raw" (the GGUF bytes); any other name needs conv */
    const char *device_kind; /* NULL = "any" */
    bool zstd;
    int level;                             /* zstd level, 0 = 3 */
    const struct ebb_pack_convert_i *conv; /* NULL for gguf-raw */
    void *conv_ctx;
};

struct ebb_pack_write_stats {
    uint32_t n_groups, n_compressed;
    uint64_t raw_bytes, stored_bytes, file_bytes;
};

/* Writes the pack of GGUF g (opened from a file whose base name names the model) to path,
 * through path.tmp renamed at the end. */
ebb_err ebb_pack_write(const struct ebb_gguf *g, const char *path,
                       const struct ebb_pack_write_opts *o, struct ebb_pack_write_stats *st,
                       struct ebb_diag *diag);

struct ebb_pack_info {
    char model_name[128];
    char layout[64];
    char device_kind[64];
    uint64_t model_size, meta_hash, file_size;
    uint32_t n_layer; /* groups 0..n_layer-1 are layers; group n_layer holds the rest */
    uint32_t n_groups, n_tensors;
};

struct ebb_pack_tensor {
    char name[64];
    uint32_t type; /* enum ebb_ggml_type */
    uint32_t group;
    uint64_t ne[4];
    uint64_t off; /* inside the group's raw bytes */
    uint64_t size;
};

struct ebb_pack;

/* Opens a pack and checks its header, directory and extents against the file (a truncated
 * file is refused naming the first group past its end) and against want (may be NULL): a
 * mismatch is EBB_EINVAL with a message naming both sides. */
ebb_err ebb_pack_open(const char *path, const struct ebb_pack_expect *want, struct ebb_pack **out,
                      struct ebb_diag *diag);
void ebb_pack_close(struct ebb_pack *p);

const struct ebb_pack_info *ebb_pack_info(const struct ebb_pack *p);
const struct ebb_pack_tensor *ebb_pack_tensor_at(const struct ebb_pack *p, uint32_t i);
/* NULL if absent. */
const struct ebb_pack_tensor *ebb_pack_find_tensor(const struct ebb_pack *p, const char *name);

/* The stored extent of group g (checksum included) for stream-io. */
ebb_err ebb_pack_group(const struct ebb_pack *p, uint32_t g, struct ebb_stream_layer *out);

/* Reads group g synchronously into dst (cap >= its raw size), verifying the checksum and
 * decoding zstd. A checksum mismatch is EBB_EFORMAT naming the group. */
ebb_err ebb_pack_read_group(struct ebb_pack *p, uint32_t g, void *dst, size_t cap,
                            struct ebb_diag *diag);

#endif
