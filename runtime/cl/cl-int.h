/* Private to runtime/cl: what the layout, weight, program and tuning files share. The public
 * interface is cl.h (devices, programs) and cl-layout.h (layouts, weights, weight programs). */
#ifndef EBB_RUNTIME_CL_INT_H
#define EBB_RUNTIME_CL_INT_H

#include "cl-layout.h"

/* Decoder facts per type: block elements, block bytes, decoder suffix, split kind (0 none,
 * 4 = 4-bit planes, 8 = 8-bit planes). */
struct ebb__cl_tinfo {
    uint32_t type, blk, tsize;
    const char *name, *dec;
    int split;
};

/* The facts of a GGUF type the layouts can hold, or NULL (cl-layout.c). */
const struct ebb__cl_tinfo *ebb__cl_tinfo(uint32_t type);

/* Texels per weight row of the quant and scale planes of an image2d weight (cl-layout.c). */
void ebb__cl_i2d_tpr(const struct ebb__cl_tinfo *ti, uint32_t n_in, uint64_t *q, uint64_t *s);

/* With EBB_CL_LAYOUT=image2d: says on stderr, once per type and shape in a row, that a weight
 * of that type (n_out x n_in, or n_out elements when n_in is 0) cannot be an image2d within the
 * limits w x h (0 x 0: no image support) and where it goes instead (cl-layout.c). */
void ebb__cl_note_image2d(uint32_t type, uint64_t n_out, uint32_t n_in, size_t w, size_t h,
                          const char *instead);

/* The kernel sources of the engine's programs, in build order after their prologue: the weight
 * programs (ebb_cl_wprog_build), the other ops (ebb_cl_ops_build) and the mixture-of-experts
 * kernels (ebb_cl_moe_build). Spelled once here for the builds, the key of the layout timing's
 * cache and scripts/cl-offline-check.sh (through tests/kernels/cl-prologue) (cl-build.c). */
/* cl-run.c: whether queues opened now record timestamps (ebb_cl_profile_queues), and the
 * EBB_CL_PROFILE=gpu table's last drain as a queue closes. */
extern bool ebb__cl_rec_queues;
void ebb__cl_prof_close(struct ebb_cl *cl);

extern const char *const ebb__cl_wprog_srcs[];
extern const size_t ebb__cl_n_wprog_srcs;
extern const char *const ebb__cl_ops_srcs[];
extern const size_t ebb__cl_n_ops_srcs;
extern const char *const ebb__cl_moe_srcs[];
extern const size_t ebb__cl_n_moe_srcs;

/* Looks up names[0..n) with ebb_cl_source into out[0..n); on failure releases what it got and
 * leaves out all NULL (cl-program.c). */
ebb_err ebb__cl_sources_get(const char *const *names, size_t n, const char **out,
                            struct ebb_diag *diag);
/* Releases srcs[0..n) (NULL entries skipped) and sets them to NULL. */
void ebb__cl_sources_put(const char **srcs, size_t n);

/* True when ctx is one of the process's shared contexts (cl.c: one per device, every model
 * opened on the device shares it, and it lives as long as the process), so programs built in it
 * may be kept and handed to later opens (cl-program.c). */
bool ebb__cl_ctx_shared(cl_context ctx);

#endif
