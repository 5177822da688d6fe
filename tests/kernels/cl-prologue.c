/* Prints the prologue the engine generates for one of its OpenCL programs on a made-up GPU, so
 * that scripts/cl-offline-check.sh can compile the programs offline (clang, SPIR target) as the
 * engine would build them on a device it cannot run here:
 *   cl-prologue VENDOR weight TYPE LAYOUT  the weight program's (ebb_cl_wprog_build: the layout
 *                                          prologue, then matvec_q8_qin's defines where it is
 *                                          built)
 *   cl-prologue VENDOR moe TYPE LAYOUT     the MoE program's (ebb_cl_moe_build)
 *   cl-prologue VENDOR ops HEAD_DIM [q8_0] the ops program's (ebb_cl_ops_build; q8_0: for the
 *                                          8-bit KV cache, tu.kv_q8)
 *   cl-prologue sources weight|moe|ops     the program's kernel sources in build order, one
 *                                          file name a line (the engine's own list)
 * VENDOR: intel, amd, arm or nvidia (inline PTX: MV_PTX, ATT_MMA): a GPU of that vendor with
 * work-groups of up to 512, 64 KiB of local memory, images and cl_khr_integer_dot_product (packed 4
 * x 8-bit inputs) listed. TYPE: a ggml type name ("Q4_K"); LAYOUT: raw, split, image or image2d.
 * The tuning is ebb_cl_tuning_for()'s for that device, so the EBB_CL_* variables steer it as they
 * steer the engine (EBB_CL_IDP=0|1, EBB_CL_MVQ8=1, ...). Exit 2 on bad arguments, 1 when the layout
 * has no prologue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl/cl-int.h"
#include "gguf/gguf.h"

static int usage(void)
{
    fprintf(stderr, "usage: cl-prologue intel|amd|arm|nvidia weight|moe TYPE "
                    "raw|split|image|image2d\n"
                    "       cl-prologue intel|amd|arm|nvidia ops HEAD_DIM [q8_0]\n"
                    "       cl-prologue sources weight|moe|ops\n");
    return 2;
}

/* The program's sources after its prologue, one a line. */
static int sources(const char *prog)
{
    const char *const *names = ebb__cl_wprog_srcs;
    size_t n = ebb__cl_n_wprog_srcs;
    if (!strcmp(prog, "moe"))
        names = ebb__cl_moe_srcs, n = ebb__cl_n_moe_srcs;
    else if (!strcmp(prog, "ops"))
        names = ebb__cl_ops_srcs, n = ebb__cl_n_ops_srcs;
    else if (strcmp(prog, "weight"))
        return usage();
    for (size_t i = 0; i < n; i++)
        puts(names[i]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "sources"))
        return sources(argv[2]);
    if (argc < 4)
        return usage();
    struct ebb_cl_dev_info di = {.is_gpu = true,
                                 .max_wg = 512,
                                 .local_mem = 64 * 1024,
                                 .global_mem = 8ull << 30,
                                 .max_alloc = 2ull << 30,
                                 .compute_units = 32,
                                 .image = true,
                                 .image2d_w = 16384,
                                 .image2d_h = 16384,
                                 .image1d_buf_max = 1u << 27,
                                 .fp16 = true,
                                 .idp = true};
    if (!strcmp(argv[1], "intel"))
        di.vendor = EBB_CL_VENDOR_INTEL;
    else if (!strcmp(argv[1], "amd"))
        di.vendor = EBB_CL_VENDOR_AMD;
    else if (!strcmp(argv[1], "arm"))
        di.vendor = EBB_CL_VENDOR_ARM;
    else if (!strcmp(argv[1], "nvidia"))
        di.vendor = EBB_CL_VENDOR_NVIDIA;
    else
        return usage();
    struct ebb_cl_tuning tu = ebb_cl_tuning_for(&di);
    struct ebb_diag d = {{0}};
    char pro[4096];
    if (!strcmp(argv[2], "ops")) {
        if (argc != 4 && (argc != 5 || strcmp(argv[4], "q8_0")))
            return usage();
        tu.kv_q8 = argc == 5; /* --kv-type q8_0 */
        if (ebb_cl_ops_prologue(&tu, (uint32_t)atoi(argv[3]), pro, sizeof(pro), &d)) {
            fprintf(stderr, "cl-prologue: %s\n", d.msg);
            return 1;
        }
        fputs(pro, stdout);
        return 0;
    }
    bool weight = !strcmp(argv[2], "weight");
    if ((!weight && strcmp(argv[2], "moe")) || argc != 5)
        return usage();
    struct ebb_cl_layout l = {.type = UINT32_MAX};
    for (uint32_t t = 0; t < 64; t++) {
        const char *n = ebb_ggml_type_name(t);
        if (n && !strcmp(n, argv[3]))
            l.type = t;
    }
    static const char *const names[] = {"raw", "split", "image", "image2d"};
    static const enum ebb_cl_storage sto[] = {EBB_CL_STORE_BUFFER, EBB_CL_STORE_BUFFER,
                                              EBB_CL_STORE_IMAGE1D, EBB_CL_STORE_IMAGE2D};
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(argv[4], names[i]))
            k = i;
    if (l.type == UINT32_MAX || k < 0)
        return usage();
    l.storage = sto[k];
    l.order = k ? EBB_CL_ORDER_SPLIT : EBB_CL_ORDER_RAW;
    if (ebb_cl_layout_prologue(&l, &tu, pro, sizeof(pro), &d)) {
        fprintf(stderr, "cl-prologue: %s\n", d.msg[0] ? d.msg : "no prologue for this layout");
        return 1;
    }
    fputs(pro, stdout);
    /* ebb_cl_wprog_build's second source: matvec_q8_qin's defines */
    uint32_t qin_wg = weight && (ebb_cl_layout_has_q16(&l, &tu) || ebb_cl_layout_has_kq8(&l, &tu))
                          ? ebb_cl_qin_wg(&tu)
                          : 0;
    if (qin_wg)
        printf("#define Q8_QIN 1\n#define QIN_ROWS %u\n#define Q8_WG %u\n", tu.qin_rows,
               EBB_CL_Q8_WG);
    return 0;
}
