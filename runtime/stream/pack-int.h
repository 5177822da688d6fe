/* Private to runtime/: the on-disk records of pack files (see pack.h), shared by the reader and
 * the writer. Fields are little-endian; ebb packs are written and read on little-endian hosts. */
#ifndef EBB_RUNTIME_PACK_INT_H
#define EBB_RUNTIME_PACK_INT_H

#include <stdint.h>

#include "pack.h"

#define EBB__PACK_MAGIC "EBBPACK1"
#define EBB__PACK_VERSION 1u
#define EBB__PACK_HDR 4096u

struct ebb__pack_hdr {
    char magic[8];
    uint32_t version, hdr_size;
    uint64_t file_size;
    uint64_t model_size, meta_hash;
    char model_name[128];
    char layout[64];
    char device_kind[64];
    uint32_t n_layer, n_groups, n_tensors, reserved;
    uint64_t groups_off, tensors_off;
    uint64_t dir_hash; /* ebb_hash64 of the group records followed by the tensor entries */
    uint64_t hdr_hash; /* ebb_hash64 of every header byte before this field */
};

struct ebb__pack_group {
    uint64_t off, stored, raw, sum;
    uint32_t codec, first_tensor, n_tensors, reserved;
};

struct ebb__pack_tensor {
    char name[64];
    uint32_t type, group;
    uint64_t ne[4];
    uint64_t off, size;
};

_Static_assert(sizeof(struct ebb__pack_group) == 48, "pack group record size");
_Static_assert(sizeof(struct ebb__pack_tensor) == 120, "pack tensor entry size");

#endif
