/* Tensor virtualization for the OpenCL engine (after ML Drift). A weight is a logical matrix
 * W (n_out rows of n_in, axes OI, I fastest) plus a layout descriptor: which physical objects
 * hold it and in which element order. Kernels in cl_kernels/ are written once against accessor
 * macros (READ_W4(o, i), READ_W(o, i), READ_X4(x, t, i), WRITE_Y(y, t, o, v), W_ARGS); the
 * prologue generated here for a layout resolves them to that layout's address arithmetic when
 * the program is built, so a layout costs nothing at run time. See docs/ENGINE.md. */
#ifndef EBB_RUNTIME_CL_LAYOUT_H
#define EBB_RUNTIME_CL_LAYOUT_H

#include "cl-knobs.h"
#include "cl.h"

/* Where the weight's bytes live. */
enum ebb_cl_storage {
    EBB_CL_STORE_BUFFER = 0,  /* plain buffers */
    EBB_CL_STORE_IMAGE1D = 1, /* quant plane read through an image1d_buffer (texture path) */
    EBB_CL_STORE_IMAGE2D = 2, /* split planes in two image2d objects: RGBA32UI quants, RGBA
                                 half scales ((d, m) of two blocks per texel); weight rows are
                                 image rows, wrapped over several image rows when wider than the
                                 device allows, several side by side when taller */
};

/* In which order. */
enum ebb_cl_order {
    EBB_CL_ORDER_RAW = 0,   /* GGUF blocks exactly as in the file (zero-copy capable) */
    EBB_CL_ORDER_SPLIT = 1, /* a quant plane (16 or 32 bytes per 32-block) and a float2 (d, m)
                               scale plane, rows in order; Q4_0, Q4_1, Q8_0 only */
};

struct ebb_cl_layout {
    uint32_t type; /* enum ebb_ggml_type */
    enum ebb_cl_storage storage;
    enum ebb_cl_order order;
};

/* A weight placed on the device. */
struct ebb_cl_weight {
    struct ebb_cl_layout layout;
    uint32_t n_in, n_out; /* W is (n_out, n_in) */
    cl_mem a;             /* raw: the blocks; split: the quant plane (IMAGE2D: its image2d) */
    cl_mem b;             /* split: float2 (d, m) per block, (n_out, n_in / 32); raw: NULL;
                             IMAGE2D: the image2d of half (d, m) pairs */
    cl_mem img;           /* IMAGE1D: RGBA32UI image1d_buffer view of a */
    uint64_t off;         /* raw: byte offset of row 0 inside a */
    uint64_t bytes;       /* device bytes this weight allocated (0 when zero-copy) */
    bool zero_copy;       /* a is a shared buffer over host memory, not owned */
    uint32_t i2d[4];      /* IMAGE2D: quant image width, height; scale image width, height */
    cl_mem ka, kb; /* raw Q4_K / Q6_K / Q5_K with KSPLIT_KEEP: the weight as k4_split wrote it
                      (ka the quant plane, kb the float2 plane) or as k8_split did (ka), kept
                      from load; else NULL */
};

/* One source of rows for ebb_cl_weight_new: n_out rows in the GGUF file's layout. Several
 * sources are stacked along O (fused Q/K/V, gate/up). */
struct ebb_cl_wsrc {
    const void *data;
    uint32_t n_out;
};

/* A device buffer over host memory (CL_MEM_USE_HOST_PTR), e.g. the mmapped GGUF file. */
struct ebb_cl_hostmap {
    cl_mem buf;
    const uint8_t *base;
    uint64_t size;
};

/* True if the layout can hold this type on this device (image support and size included; for
 * IMAGE2D only the total capacity, as the shape is unknown: ebb_cl_weight_new checks the shape
 * and falls back, see there). */
bool ebb_cl_layout_ok(const struct ebb_cl_dev_info *di, const struct ebb_cl_layout *l,
                      uint64_t n_elements);

/* The image2d limits the layouts use: the device's CL_DEVICE_IMAGE2D_MAX_WIDTH/HEIGHT (0 without
 * image support), lowered by the knob EBB_CL_IMAGE2D_MAX=W[,H] (tests and experiments: forces
 * rows to wrap or to be packed side by side). */
void ebb_cl_image2d_limits(const struct ebb_cl_dev_info *di, size_t *w, size_t *h);

/* Size of the image2d holding a plane of n_rows weight rows of tpr texels each within limits
 * (w_max, h_max): tpr x n_rows when it fits; R = ceil(n_rows / h_max) rows side by side
 * (R * tpr wide) when the rows are too many; each row wrapped over K = ceil(tpr / w_max) image
 * rows (ceil(tpr / K) wide) when a row is too wide. false when neither fits. The kernels
 * (quant.cl i2d_pos) derive the same mapping from the image's width. */
bool ebb_cl_image2d_shape(uint64_t tpr, uint64_t n_rows, size_t w_max, size_t h_max, size_t *w,
                          size_t *h);

/* Like ebb_cl_layout_ok for an exact shape: for IMAGE2D also that both planes of an
 * (n_out, n_in) weight fit the image2d limits. */
bool ebb_cl_layout_fits(const struct ebb_cl_dev_info *di, const struct ebb_cl_layout *l,
                        uint32_t n_in, uint32_t n_out);

/* The layout the engine uses for a weight of this type on this device. The environment
 * variable EBB_CL_LAYOUT (raw, split, image = split image1d_buffer, image2d) overrides the choice
 * where it is valid. */
struct ebb_cl_layout ebb_cl_layout_choose(const struct ebb_cl_dev_info *di, uint32_t type,
                                          uint64_t n_elements);

/* Like ebb_cl_layout_choose, but on GPUs with more than one valid layout for the type, times
 * matvec over a sample weight (rows: n_out rows of n_in in the file's layout) in each and takes
 * the fastest. The choice is cached per device, driver, type and shape in the kernel cache
 * directory, so only the first load measures. The candidates are raw, split buffer, split
 * image1d_buffer and split image2d, where ebb_cl_layout_fits() says so. Falls back to
 * ebb_cl_layout_choose() on CPUs (the zero-copy raw layout wins there; EBB_CL_TUNE=1 measures
 * anyway, for tests), with EBB_CL_LAYOUT set, or on any error. */
struct ebb_cl_layout ebb_cl_layout_tune(struct ebb_cl *cl, const struct ebb_cl_tuning *tu,
                                        uint32_t type, uint32_t n_in, const void *rows,
                                        uint32_t n_out);

/* "Q4_1/split/image1d", "Q8_0/split/image2d" */
const char *ebb_cl_layout_name(const struct ebb_cl_layout *l, char *buf, size_t cap);

/* Writes the generated OpenCL prologue that defines the accessor macros for layout l plus the
 * tuning options; EBB_EUNSUPPORTED for a type/layout pair without decoder. */
ebb_err ebb_cl_layout_prologue(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu,
                               char *buf, size_t cap, struct ebb_diag *diag);

/* Places a weight of n_in columns built from src[0..n) (stacked along O) in layout l. Raw
 * layouts over a hostmap whose sources are contiguous in it are zero-copy; everything else is
 * rearranged on the host and copied once. An IMAGE2D layout whose shape does not fit the
 * device's image2d limits (ebb_cl_layout_fits) is placed split in an image1d_buffer, or in
 * buffers, instead: out->layout says which (a note on stderr when EBB_CL_LAYOUT asked for it). */
ebb_err ebb_cl_weight_new(struct ebb_cl *cl, const struct ebb_cl_layout *l, uint32_t n_in,
                          const struct ebb_cl_wsrc *src, size_t n, const struct ebb_cl_hostmap *map,
                          struct ebb_cl_weight *out, struct ebb_diag *diag);

/* The bytes a product reads of the whole weight in its layout (both planes of a split one); a
 * placed weight or a template with only its layout and shape set. */
uint64_t ebb_cl_weight_read_bytes(const struct ebb_cl_weight *w);

/* Releases what ebb_cl_weight_new created; accepts a zeroed struct. */
void ebb_cl_weight_fini(struct ebb_cl_weight *w);

/* Sets the two W_ARGS kernel arguments at index first and first + 1. */
ebb_err ebb_cl_weight_set_args(const struct ebb_cl_weight *w, cl_kernel k, cl_uint first,
                               struct ebb_diag *diag);

/* The weight kernels of a program, and their launch shape for n_out rows and nt tokens (global
 * and local sizes, 2 dimensions; the one place that knows them). */
enum ebb_cl_wkernel {
    EBB_CL_WK_MATVEC = 0, /* matvec: (n_out * MV_WG, nt), (MV_WG * MV_ROWS, 1) */
    EBB_CL_WK_MATMUL,     /* tiled matmul: (n_out, nt / MM_T), (MM_WG, 1) */
    EBB_CL_WK_COOP,       /* matmul_coop: (n_out * MV_WG, nt / MM_T), (MV_WG * MV_ROWS, 1) */
    EBB_CL_WK_GEMM,       /* matmul_gemm: (256 * n_out / 64, nt / 64), (256, 1) */
    EBB_CL_WK_MMA,        /* matmul_mma: (256 * n_out / mma_r, nt / mma_t), (256, 1) */
    EBB_CL_WK_MVCPU,      /* matvec_cpu: (n_out / mv_cpu_r, nt), (MV_ROWS, 1) */
    EBB_CL_WK_MMS,        /* matmul_mms: (32 mms_w n_out / (16 mms_mi), nt / mms_t),
                             (32 mms_w, 1) */
    EBB_CL_WK_MMP,        /* matmul_mms with the mmp_* tile (the same with mmp_*) */
    EBB_CL_WK_MMQ,        /* matmul_mmq with the mmq_* tile: (32 mmq_w nt / mmq_t,
                             n_out / (16 mmq_mi)), tokens first */
    EBB_CL_WK_MMQS,       /* matmul_mmq with the mms_* tile (the same with mms_*) */
    EBB_CL_WK_MMQL,       /* matmul_mmql with the mmql_* tile: (32 mmql_w nt / mmql_t,
                             n_out / (16 mmql_mi mmql_w)), tokens first */
    EBB_CL_WK_MMQLS,      /* matmul_mmql with the mms_* tile (the same with mms_*) */
    EBB_CL_WK_MMQLK,      /* matmul_mmql with the mmqk_* tile (Q4_K; the same) */
    EBB_CL_WK_MMQLK5,     /* matmul_mmql with the mmqk5_* tile (Q5_K; the same) */
    EBB_CL_WK_MMQLK6,     /* matmul_mmql with the mmqk6_* tile (Q6_K; the same) */
    EBB_CL_WK_MMQLB,      /* matmul_mmql with the mmqs_* tile (batched steps; the same) */
    EBB_CL_WK_MMQLB6,     /* matmul_mmql with the mmqs6_* tile (Q6_K's batched steps; the same) */
};
/* moe_gate_up_q8's work-group (moe.cl's MOE_GU_WG) and moe_down_q8's work-items a row
 * (MOE_DN_L) under tu. */
uint32_t ebb_cl_moe_gu_wg(const struct ebb_cl_tuning *tu);
uint32_t ebb_cl_moe_dn_l(const struct ebb_cl_tuning *tu);
/* moe_router_q8's router rows a work-group under tu (moe.cl's MOE_RT_ROWS): EBB_CL_MOE_RT_ROWS's
 * (2 unless set), at most EBB_CL_Q8_WG / mv_wg. */
uint32_t ebb_cl_moe_rt_rows(const struct ebb_cl_tuning *tu);
/* matvec_q8's global and local sizes for n_out rows (MVQ_WG work-items a row). */
void ebb_cl_q8_shape(const struct ebb_cl_tuning *tu, uint32_t n_out, size_t g[2], size_t l[2]);

/* matvec_q8_qin's work-group size under tu (MVQ_WG x qin_rows work-items), or 0 where tu has it
 * off or the kernel cannot be built (with PTX its shuffles want whole warps). */
uint32_t ebb_cl_qin_wg(const struct ebb_cl_tuning *tu);

/* Whether decode may run matvec_q8_qin for a product of n_out rows of n_in inputs (a multiple
 * of 32) on a device with local_mem bytes of local memory a work-group: tu->qin of at least 1
 * (2 for glu inputs), n_in within tu->qin_max, n_out within tu->qin_out_max, and its int8 row,
 * the row's scales and the kernel's own arrays within local_mem. */
bool ebb_cl_qin_fits(const struct ebb_cl_tuning *tu, uint64_t local_mem, uint32_t n_in,
                     uint32_t n_out, int glu);

/* matvec_q8_qin's global and local size for n_out rows (qin_rows a work-group). */
void ebb_cl_qin_shape(const struct ebb_cl_tuning *tu, uint32_t n_out, size_t g[2], size_t l[2]);

/* mmq_quantize's launch for nt rows of n_in inputs (8 work-items a block of 32). */
void ebb_cl_mmq_quantize_shape(uint32_t n_in, uint32_t nt, size_t g[2], size_t l[2]);

/* Local memory of matvec_q8_qin's two local arguments for n_in inputs: the int8 row, then its
 * per-32 scales (float2). */
void ebb_cl_qin_local(uint32_t n_in, size_t *xl_bytes, size_t *dl_bytes);

void ebb_cl_wkernel_shape(const struct ebb_cl_tuning *tu, enum ebb_cl_wkernel k, uint32_t n_out,
                          uint32_t nt, size_t g[2], size_t l[2]);

/* True when layout l has the whole-32-block decoder (W_DEQ32) under tuning tu. */
bool ebb_cl_layout_has_deq32(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu);

/* True when layout l has the whole-4-bit-block decoder (W_Q16) under tuning tu. */
bool ebb_cl_layout_has_q16(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu);

/* True when layout l has matmul_mms's word accessors (W_QW, or W_QW8 for byte-wide weights;
 * W_QX) under tuning tu: the W_Q16 layouts, raw Q4_K, Q8_0, Q6_K, Q5_0 and Q5_K. */
bool ebb_cl_layout_has_qw(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu);
/* The kind whose tile matmul_mmql's prefill products of layout l take: EBB_CL_WK_MMQLK6 (Q6_K:
 * mmqk6_*), EBB_CL_WK_MMQLK5 (Q5_K: mmqk5_*), EBB_CL_WK_MMQLK (Q4_K: mmqk_*), else
 * EBB_CL_WK_MMQL (mmql_*). */
enum ebb_cl_wkernel ebb_cl_mmql_kind(const struct ebb_cl_layout *l);
/* The same for moe_group_mmql's grouped products, whose Q6_K weights keep the Q5_K tile (a
 * tile's tokens are one expert's pairs: fewer than dense prefill's). */
enum ebb_cl_wkernel ebb_cl_mmql_group_kind(const struct ebb_cl_layout *l);
/* The same for the products of a batch's steps (tu.mmqs..tu.mmq - 1 rows): EBB_CL_WK_MMQLB6
 * (Q6_K: mmqs6_*), else EBB_CL_WK_MMQLB (mmqs_*). */
enum ebb_cl_wkernel ebb_cl_mmql_batch_kind(const struct ebb_cl_layout *l);
/* The tile T, MI, W, KB (as the tuning holds it, 0 where unset) of matmul_mmql kind k
 * (EBB_CL_WK_MMQL, _MMQLK, _MMQLK5, _MMQLK6, _MMQLB, _MMQLB6, _MMQLS) under tu. */
void ebb_cl_mmql_tile(const struct ebb_cl_tuning *tu, enum ebb_cl_wkernel k, uint32_t tile[4]);

/* True when layout l has kq8.cl's 8-bit-input decode (W_KQ8) under tuning tu: raw Q8_0, Q5_0,
 * Q5_1, Q4_K, Q5_K or Q6_K blocks in a buffer, with tu->mv_q8 and tu->kq8. */
bool ebb_cl_layout_has_kq8(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu);

/* True when a weight of layout l may be matvec_q8_mix's second weight under tu (kq8.cl's
 * KQ8_MIX_* types: raw Q8_0, Q4_K, Q5_K, Q6_K, with tu->kq8_mix). */
bool ebb_cl_kq8_mix_type(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu);

/* A program of the weight kernels (matvec, matmul, get_rows) for one layout; matvec_q8 (weights
 * against quantize_x8's int8 input) only where tu->mv_q8 and the layout has W_Q16 (4-bit
 * blocks, matvec.cl) or W_KQ8 (kq8.cl), else NULL; matvec_q8r with it (W_KQ8: where
 * tu->kq8r). */
struct ebb_cl_wprog {
    struct ebb_cl_layout layout;
    cl_program prog;
    cl_kernel matvec, matmul, matmul_coop, matmul_gemm, get_rows, matvec_q8;
    cl_kernel matvec_q8r;     /* with matvec_q8 (W_KQ8: where tu->kq8r > 1), else NULL */
    cl_kernel matvec_q8_qin;  /* with matvec_q8 where ebb_cl_qin_wg, else NULL */
    cl_kernel matvec_q8_mix;  /* with matvec_q8 of kq8.cl's types, else NULL */
    cl_kernel matmul_mma;     /* with tu->mm_mma, else NULL */
    cl_kernel matmul_mmb;     /* with tu->mm_mma, else NULL */
    cl_kernel matmul_mms;     /* with tu->mm_mma where the layout has W_QW, else NULL */
    cl_kernel matmul_mmp;     /* matmul_mms with the mmp_* tile, where tu->mms_big, else NULL */
    cl_kernel matmul_mmq;     /* with matmul_mms where tu->mmq: its tile on 8-bit inputs */
    cl_kernel matmul_mmqp;    /* the same with the mmq_* tile (prefill), with matmul_mmq; with
                                 tu->mmq_stage matmul_mmql with the mmql_* tile */
    cl_kernel matmul_mmqs;    /* matmul_mmql with the mmqs_* tile (batched steps of mmqs..mmq - 1
                                 rows of Q4_0), else NULL */
    cl_kernel mmq_quantize;   /* matmul_mmq's inputs, with matmul_mmq */
    cl_kernel mmq_quant_nw;   /* with it: mmq_quantize_norm (rows RMS-normed first) */
    cl_kernel mmq_quant_glu;  /* with it: mmq_quantize_glu (SwiGLU of gate and up halves) */
    cl_kernel mmq_quant_r;    /* with it: mmq_quantize_res (MMQ_RES's two passes) */
    cl_kernel mmq_quant_nw_r; /* with it: mmq_quantize_norm_res */
    cl_kernel matmul_mmql;    /* with matmul_mmq: matmul_mmql on the mms_* tile where its
                                 staging fits local memory, else NULL */
    cl_kernel moe_group_mms;  /* matmul_mms's tile over a tile of expert pairs (moe.cl's
                                 grouped prefill on tensor cores), with matmul_mms where
                                 tu->mms_t is 16, else NULL */
    cl_kernel matvec_cpu;     /* with tu->mv_cpu where the layout has W_DEQ32, else NULL */
    cl_kernel k4_split;       /* raw Q4_K with tu->k4split and matmul_mmqp on the mmql_* tiles:
                                 the weight as split Q4_1 planes (matmul-mma.cl), else NULL */
    cl_kernel k8_split; /* raw Q6_K / Q5_K with tu->k8split and matmul_mmqp on the mmql_* tiles:
                           the weight as a byte a weight and its halves' scales, else NULL */
    cl_kernel matmul_mmq_s8;  /* with k8_split: matmul_mmql built with MQL_S8H on the mmql_* tile
                                 (reads what k8_split wrote) */
    cl_kernel matmul_mmqs_s8; /* with k8_split and matmul_mmqs: the same on the mmqs_* tile
                                 (a batch's products on k8_split's bytes) */
};

/* Builds and runs mma.cl's probe (one m16n8k16 tile through inline PTX) and checks the result
 * against the CPU: true when this device's tensor-core path may be used. The program is cached
 * like every other; the run takes microseconds. */
bool ebb_cl_mma_probe(struct ebb_cl *cl);
/* True when cp.async into local memory (with its zero fill) and ldmatrix.trans run on this
 * device as attn_prefill_mma's ATT_ASYNC path expects them (PTX, sm_80 and later). */
bool ebb_cl_async_probe(struct ebb_cl *cl);

/* Builds and runs q8.cl's idp_probe (dot4_ss and dot4_us under MV_IDP, through
 * cl_khr_integer_dot_product's dot_4x8packed_ss_int / dot_4x8packed_us_int, with the options
 * of the weight programs) on signed, unsigned and extreme bytes (-128, 127, 255) and
 * accumulators of both signs, and compares every result with the CPU's exactly: true when
 * MV_IDP may be used. Where the compiler declares no such builtins (neither
 * cl_khr_integer_dot_product nor __opencl_c_integer_dot_product_input_4x8bit_packed defined)
 * the kernel runs the portable dots instead and the probe returns false, without a build error.
 * *exact (may be NULL): whether the kernel's dots, whichever branch ran, matched the CPU's. The
 * program is cached like every other. */
bool ebb_cl_idp_probe(struct ebb_cl *cl, bool *exact);
/* The same with defs compiled ahead of the probe's own prologue (tests: stand-ins for the
 * builtins, right or wrong, on a device that has none); NULL: none. */
bool ebb_cl_idp_probe_with(struct ebb_cl *cl, const char *defs, bool *exact);

ebb_err ebb_cl_wprog_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                           const struct ebb_cl_tuning *tu, struct ebb_cl_wprog *out,
                           struct ebb_diag *diag);
void ebb_cl_wprog_fini(struct ebb_cl_wprog *p);

/* How the program of k (a matmul_mmql) stages its tiles: the cp.async stages, 0 through
 * registers, -1 when that cannot be asked (it runs the program's mmql_info once). */
int ebb_cl_mmql_stages(struct ebb_cl *cl, cl_kernel k);

/* Builds moe.cl's mixture-of-experts kernels (moe_route, moe_gather, moe_down, and
 * moe_gather_q8 / moe_down_q8 where ebb_cl_layout_has_kq8) for expert stacks placed in layout l
 * (one weight of n_expert x rows-per-expert rows). */
ebb_err ebb_cl_moe_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                         const struct ebb_cl_tuning *tu, cl_program *out, struct ebb_diag *diag);

/* moe.cl's grouped prefill kernels (moe_group_gu, moe_group_down) under tu: the rows a
 * work-group takes (moe.cl's MOE_GR: teams of MV_WG work-items, each team 4 rows where MV_WG is
 * 32 or more, 2 where it is 16, else 1), its work-items in *wg (MOE_GW: 256, 64 with one
 * work-item a row); 0 where MV_WG exceeds the work-group. Global (ceil(n_rows / rows) * wg,
 * n_tiles), local (wg, 1). */
uint32_t ebb_cl_moe_group_rows(const struct ebb_cl_tuning *tu, uint32_t *wg);

/* The weight program of layout l built with moe_group_mms's tile (mms_t 16, mg_mi, mg_w,
 * mg_kb; no second tile) into *out, whose moe_group_mms is then the grouped MoE prefill product
 * on tensor cores, or NULL where l or tu has no matmul_mms. Release with ebb_cl_wprog_fini. */
ebb_err ebb_cl_moe_mms_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                             const struct ebb_cl_tuning *tu, struct ebb_cl_wprog *out,
                             struct ebb_diag *diag);

/* moe_group_mmql's kernels for the expert stacks of layout l (built with MQL_G and matmul_mmql's
 * prefill tile for l): the grouped products, mmq_quantize (their gate and up inputs) and
 * mmq_quantize_glu (their down inputs); t is the tile's pairs (MS_T). All NULL where l or tu
 * has no matmul_mmql (tensor cores, tu->mmq and its staging, the word accessors). */
struct ebb_cl_moe_mmql {
    cl_kernel group, quantize, quantize_glu;
    uint32_t t;
};
ebb_err ebb_cl_moe_mmql_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                              const struct ebb_cl_tuning *tu, struct ebb_cl_moe_mmql *out,
                              struct ebb_diag *diag);
void ebb_cl_moe_mmql_fini(struct ebb_cl_moe_mmql *k);

/* Decode attention's work-group size under tu: att_wg, or norm_wg where it is unset. */
uint32_t ebb_cl_att_wg(const struct ebb_cl_tuning *tu);

/* Bytes of local memory a decode attention work-group stages its chunk's keys and values in
 * under tu (ATT_DASYNC), 0 where it does not. */
uint64_t ebb_cl_att_stage(const struct ebb_cl_tuning *tu, uint32_t head_dim);

/* Decode attention's sub-chunk under tu (ATT_SUB): att_sub where it is shorter than the chunk,
 * else the chunk (no sub-chunks). */
uint32_t ebb_cl_att_sub(const struct ebb_cl_tuning *tu);

/* Whether that staging fits local_mem bytes next to the work-group's other arrays: false where
 * tu stages nothing. */
bool ebb_cl_att_stage_fits(const struct ebb_cl_tuning *tu, uint32_t head_dim, uint64_t local_mem);

/* The dimensions of one work-group of decode attention's second pass (attention.cl's ATT_DS:
 * 32 where head_dim is a multiple of 32, else head_dim): its launches are (slice x rr, n_head x
 * head_dim / slice), a work-group per slice of each head. */
uint32_t ebb_cl_att_red_ds(uint32_t head_dim);

/* attn_prefill_mma (tensor-core prefill attention, cl_kernels/attention.cl) for heads of
 * head_dim: its work-groups per head (1 up to 128 dimensions, 2 for 256, each writing half the
 * output), 0 where it is not built for that head. */
uint32_t ebb_cl_att_mma_split(uint32_t head_dim);
/* attn_prefill_mma's work-group (128 or 256 work-items: ATT_MMA_W warps of 16 queries each). */
uint32_t ebb_cl_att_mma_wg(const struct ebb_cl_tuning *tu);

/* Local memory in bytes of a decode attention work-group (attention.cl's ATT_LOCAL, and the
 * rope kernel's halves) for head_dim and g query heads a work-group under tu. */
uint64_t ebb_cl_att_local(const struct ebb_cl_tuning *tu, uint32_t head_dim, uint32_t g);

/* Writes the prologue of ebb_cl_ops_build's program for heads of head_dim under tu into buf
 * (scripts/cl-offline-check.sh compiles the programs offline with it); EBB_ERANGE when cap is
 * too small. */
ebb_err ebb_cl_ops_prologue(const struct ebb_cl_tuning *tu, uint32_t head_dim, char *buf,
                            size_t cap, struct ebb_diag *diag);

/* Builds the program of the other kernels (ops.cl and attention.cl: norms, RoPE with KV write,
 * attention, SwiGLU, add, softmax, top-k; with tu->mv_q8 also q8.cl's quantize_x8) for heads of
 * head_dim (a multiple of 4). */
ebb_err ebb_cl_ops_build(struct ebb_cl *cl, const struct ebb_cl_tuning *tu, uint32_t head_dim,
                         cl_program *out, struct ebb_diag *diag);

#endif
