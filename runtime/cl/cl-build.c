/* The engine's programs (the weight programs, the other ops, the mixture-of-experts kernels)
 * built from cl_kernels/ under a layout and a tuning, and the launch shapes of their kernels. */
#include "cl-int.h"

#include <string.h>

#include "gguf/gguf.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

const char *const ebb__cl_wprog_srcs[] = {"act.cl",    "half.cl",       "quant.cl",
                                          "q8.cl",     "mma.cl",        "matvec.cl",
                                          "matmul.cl", "matmul-mma.cl", "kq8.cl"};
const size_t ebb__cl_n_wprog_srcs = N_OF(ebb__cl_wprog_srcs);

const char *const ebb__cl_ops_srcs[] = {"act.cl", "half.cl",      "ops.cl",
                                        "mma.cl", "attention.cl", "q8.cl"};
const size_t ebb__cl_n_ops_srcs = N_OF(ebb__cl_ops_srcs);
const char *const ebb__cl_moe_srcs[] = {"half.cl", "quant.cl", "q8.cl", "kq8.cl", "moe.cl"};
const size_t ebb__cl_n_moe_srcs = N_OF(ebb__cl_moe_srcs);

/* Kernel name of the weight program's sources srcs (srcs[0] is pro, cap bytes: the prologue,
 * rewritten here) built for layout l with matmul_mms's tile set to (t, mi, w, kb) in tu; the
 * kernel keeps its program alive. */
static ebb_err tile_kernel(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                           const struct ebb_cl_tuning *tu, uint32_t t, uint32_t mi, uint32_t w,
                           uint32_t kb, char *pro, size_t cap, const char **srcs, size_t n_src,
                           const char *name, cl_kernel *k, struct ebb_diag *diag)
{
    struct ebb_cl_tuning tt = *tu;
    tt.mms_t = t;
    tt.mms_mi = mi;
    tt.mms_w = w;
    tt.mms_kb = kb;
    cl_program prog = NULL;
    ebb_err rc;
    if ((rc = ebb_cl_layout_prologue(l, &tt, pro, cap, diag)) ||
        (rc = ebb_cl_program_build(cl, srcs, n_src, "-cl-mad-enable", &prog, diag)))
        return rc;
    rc = ebb_cl_kernel(prog, name, k, diag);
    clReleaseProgram(prog);
    return rc;
}

ebb_err ebb_cl_wprog_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                           const struct ebb_cl_tuning *tu, struct ebb_cl_wprog *out,
                           struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char pro[2048];
    /* the prologue, matvec_q8_qin's defines, then the sources */
    const char *srcs[2 + N_OF(ebb__cl_wprog_srcs)] = {pro, ""};
    size_t n_src = N_OF(srcs);
    struct ebb_cl_wprog p = {.layout = *l};
    if ((rc = ebb_cl_layout_prologue(l, tu, pro, sizeof(pro), diag)) ||
        (rc = ebb__cl_sources_get(ebb__cl_wprog_srcs, ebb__cl_n_wprog_srcs, srcs + 2, diag)))
        goto out;
    /* matvec_q8_qin (tuning qin) and the helpers of q8.cl it shares with quantize_x8 */
    uint32_t qin_wg =
        ebb_cl_layout_has_q16(l, tu) || ebb_cl_layout_has_kq8(l, tu) ? ebb_cl_qin_wg(tu) : 0;
    char qdef[96] = "";
    if (qin_wg)
        snprintf(qdef, sizeof(qdef), "#define Q8_QIN 1\n#define QIN_ROWS %u\n#define Q8_WG %u\n",
                 tu->qin_rows, EBB_CL_Q8_WG);
    srcs[1] = qdef;
    if ((rc = ebb_cl_program_build(cl, srcs, n_src, "-cl-mad-enable", &p.prog, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matvec", &p.matvec, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matmul", &p.matmul, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matmul_coop", &p.matmul_coop, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matmul_gemm", &p.matmul_gemm, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "get_rows", &p.get_rows, diag)) ||
        (tu->mv_q8 && ebb_cl_layout_has_q16(l, tu) &&
         ((rc = ebb_cl_kernel(p.prog, "matvec_q8", &p.matvec_q8, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "matvec_q8r", &p.matvec_q8r, diag)))) ||
        (tu->mv_q8 && qin_wg &&
         (rc = ebb_cl_kernel(p.prog, "matvec_q8_qin", &p.matvec_q8_qin, diag))) ||
        (ebb_cl_layout_has_kq8(l, tu) &&
         ((rc = ebb_cl_kernel(p.prog, "matvec_q8", &p.matvec_q8, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "matvec_q8_mix", &p.matvec_q8_mix, diag)) ||
          (tu->kq8r > 1 && (rc = ebb_cl_kernel(p.prog, "matvec_q8r", &p.matvec_q8r, diag))))) ||
        (tu->mm_mma && ((rc = ebb_cl_kernel(p.prog, "matmul_mma", &p.matmul_mma, diag)) ||
                        (rc = ebb_cl_kernel(p.prog, "matmul_mmb", &p.matmul_mmb, diag)))) ||
        (tu->mm_mma && ebb_cl_layout_has_qw(l, tu) &&
         (rc = ebb_cl_kernel(p.prog, "matmul_mms", &p.matmul_mms, diag))) ||
        (tu->mm_mma && tu->mmq && ebb_cl_layout_has_qw(l, tu) &&
         ((rc = ebb_cl_kernel(p.prog, "matmul_mmq", &p.matmul_mmq, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "mmq_quantize", &p.mmq_quantize, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "mmq_quantize_norm", &p.mmq_quant_nw, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "mmq_quantize_glu", &p.mmq_quant_glu, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "mmq_quantize_res", &p.mmq_quant_r, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "mmq_quantize_norm_res", &p.mmq_quant_nw_r, diag)))) ||
        (p.matmul_mmq &&
         ebb_cl_mmql_bytes(tu->mms_t, tu->mms_mi, tu->mms_w, tu->mms_kb) <= 48 * 1024 &&
         (rc = ebb_cl_kernel(p.prog, "matmul_mmql", &p.matmul_mmql, diag))) ||
        (tu->mm_mma && ebb_cl_layout_has_qw(l, tu) && tu->mms_t == 16 &&
         (rc = ebb_cl_kernel(p.prog, "moe_group_mms", &p.moe_group_mms, diag))) ||
        (tu->mv_cpu && ebb_cl_layout_has_deq32(l, tu) &&
         (rc = ebb_cl_kernel(p.prog, "matvec_cpu", &p.matvec_cpu, diag))))
        goto out;
    /* The prefill tiles: matmul_mms's second tile and matmul_mmq's, each the same sources
     * built again with that shape; the kernel keeps its program alive. */
    uint32_t pt[4], bt[4]; /* matmul_mmql's prefill and batch tiles for l */
    ebb_cl_mmql_tile(tu, ebb_cl_mmql_kind(l), pt);
    ebb_cl_mmql_tile(tu, ebb_cl_mmql_batch_kind(l), bt);
    if ((p.matmul_mms && tu->mms_big && tu->mms_big <= tu->mms_max &&
         (rc = tile_kernel(cl, l, tu, tu->mmp_t, tu->mmp_mi, tu->mmp_w, tu->mmp_kb, pro,
                           sizeof(pro), srcs, n_src, "matmul_mms", &p.matmul_mmp, diag))) ||
        (p.matmul_mmq && !tu->mmq_stage &&
         (rc = tile_kernel(cl, l, tu, tu->mmq_t, tu->mmq_mi, tu->mmq_w, tu->mmq_kb, pro,
                           sizeof(pro), srcs, n_src, "matmul_mmq", &p.matmul_mmqp, diag))) ||
        (p.matmul_mmq && tu->mmq_stage &&
         (rc = tile_kernel(cl, l, tu, pt[0], pt[1], pt[2], pt[3], pro, sizeof(pro), srcs, n_src,
                           "matmul_mmql", &p.matmul_mmqp, diag))) ||
        (p.matmul_mmq && tu->mmq_stage && tu->mmqs && tu->mmqs < tu->mmq &&
         (l->type == EBB_GGML_Q4_0 || tu->mmqs_all) &&
         (rc = tile_kernel(cl, l, tu, bt[0], bt[1], bt[2], bt[3], pro, sizeof(pro), srcs, n_src,
                           "matmul_mmql", &p.matmul_mmqs, diag))) ||
        (p.matmul_mmqp && tu->mmq_stage && tu->k4split && l->type == EBB_GGML_Q4_K &&
         l->order == EBB_CL_ORDER_RAW && l->storage == EBB_CL_STORE_BUFFER &&
         (rc = ebb_cl_kernel(p.prog, "k4_split", &p.k4_split, diag))))
        goto out;
    /* K8SPLIT (Q6_K, Q5_K): k8_split, and matmul_mmql on the mmql_* tile reading what it writes */
    if (p.matmul_mmqp && tu->mmq_stage && tu->k8split && !tu->mql_s8h &&
        (l->type == EBB_GGML_Q6_K || l->type == EBB_GGML_Q5_K) && l->order == EBB_CL_ORDER_RAW &&
        l->storage == EBB_CL_STORE_BUFFER) {
        struct ebb_cl_tuning t8 = *tu;
        uint32_t qt[4];
        t8.mql_s8h = 1;
        ebb_cl_mmql_tile(tu, EBB_CL_WK_MMQL, qt);
        if ((rc = ebb_cl_kernel(p.prog, "k8_split", &p.k8_split, diag)) ||
            (rc = tile_kernel(cl, l, &t8, qt[0], qt[1], qt[2], qt[3], pro, sizeof(pro), srcs, n_src,
                              "matmul_mmql", &p.matmul_mmq_s8, diag)))
            goto out;
        ebb_cl_mmql_tile(tu, EBB_CL_WK_MMQLB, qt);
        if (p.matmul_mmqs &&
            (rc = tile_kernel(cl, l, &t8, qt[0], qt[1], qt[2], qt[3], pro, sizeof(pro), srcs, n_src,
                              "matmul_mmql", &p.matmul_mmqs_s8, diag)))
            goto out;
    }
    *out = p;
    memset(&p, 0, sizeof(p));
out:
    ebb_cl_wprog_fini(&p);
    ebb__cl_sources_put(srcs + 2, ebb__cl_n_wprog_srcs);
    return rc;
}

int ebb_cl_mmql_stages(struct ebb_cl *cl, cl_kernel k)
{
    cl_program prog = NULL;
    cl_kernel ki = NULL;
    cl_mem b = NULL;
    cl_int e = CL_SUCCESS, v = -1;
    if (!k || clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof(prog), &prog, NULL) != CL_SUCCESS ||
        ebb_cl_kernel(prog, "mmql_info", &ki, NULL))
        return -1;
    b = clCreateBuffer(cl->ctx, CL_MEM_WRITE_ONLY, sizeof(v), NULL, &e);
    size_t one = 1;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(b)};
    if (e || ebb_cl_set_args(ki, 0, a, 1, NULL) || ebb_cl_run(cl, ki, 1, &one, &one, NULL) ||
        ebb_cl_read(cl, b, 0, sizeof(v), &v, NULL))
        v = -1;
    if (b)
        clReleaseMemObject(b);
    clReleaseKernel(ki);
    return v;
}

void ebb_cl_wprog_fini(struct ebb_cl_wprog *p)
{
    if (p->matvec)
        clReleaseKernel(p->matvec);
    if (p->matmul)
        clReleaseKernel(p->matmul);
    if (p->matmul_coop)
        clReleaseKernel(p->matmul_coop);
    if (p->matmul_gemm)
        clReleaseKernel(p->matmul_gemm);
    if (p->get_rows)
        clReleaseKernel(p->get_rows);
    if (p->matvec_cpu)
        clReleaseKernel(p->matvec_cpu);
    if (p->matvec_q8)
        clReleaseKernel(p->matvec_q8);
    if (p->matvec_q8r)
        clReleaseKernel(p->matvec_q8r);
    if (p->matvec_q8_qin)
        clReleaseKernel(p->matvec_q8_qin);
    if (p->matvec_q8_mix)
        clReleaseKernel(p->matvec_q8_mix);
    if (p->matmul_mma)
        clReleaseKernel(p->matmul_mma);
    if (p->matmul_mmb)
        clReleaseKernel(p->matmul_mmb);
    if (p->matmul_mms)
        clReleaseKernel(p->matmul_mms);
    if (p->matmul_mmp)
        clReleaseKernel(p->matmul_mmp);
    if (p->moe_group_mms)
        clReleaseKernel(p->moe_group_mms);
    if (p->matmul_mmq)
        clReleaseKernel(p->matmul_mmq);
    if (p->matmul_mmqp)
        clReleaseKernel(p->matmul_mmqp);
    if (p->matmul_mmqs)
        clReleaseKernel(p->matmul_mmqs);
    if (p->mmq_quantize)
        clReleaseKernel(p->mmq_quantize);
    if (p->mmq_quant_nw)
        clReleaseKernel(p->mmq_quant_nw);
    if (p->mmq_quant_glu)
        clReleaseKernel(p->mmq_quant_glu);
    if (p->mmq_quant_r)
        clReleaseKernel(p->mmq_quant_r);
    if (p->mmq_quant_nw_r)
        clReleaseKernel(p->mmq_quant_nw_r);
    if (p->matmul_mmql)
        clReleaseKernel(p->matmul_mmql);
    if (p->k4_split)
        clReleaseKernel(p->k4_split);
    if (p->k8_split)
        clReleaseKernel(p->k8_split);
    if (p->matmul_mmq_s8)
        clReleaseKernel(p->matmul_mmq_s8);
    if (p->matmul_mmqs_s8)
        clReleaseKernel(p->matmul_mmqs_s8);
    if (p->prog)
        clReleaseProgram(p->prog);
    memset(p, 0, sizeof(p[0]));
}

uint32_t ebb_cl_moe_group_rows(const struct ebb_cl_tuning *tu, uint32_t *wg)
{
    uint32_t mv = tu->mv_wg, n = mv > 1 ? 256 : 64;
    *wg = n;
    if (!mv || mv > n)
        return 0;
    return n / mv * (mv >= 32 ? 4 : mv >= 16 ? 2 : 1);
}

ebb_err ebb_cl_moe_mms_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                             const struct ebb_cl_tuning *tu, struct ebb_cl_wprog *out,
                             struct ebb_diag *diag)
{
    struct ebb_cl_tuning t = *tu;
    t.mms_t = 16;
    t.mms_mi = tu->mg_mi;
    t.mms_w = tu->mg_w;
    t.mms_kb = tu->mg_kb;
    t.mms_big = 0;
    return ebb_cl_wprog_build(cl, l, &t, out, diag);
}

ebb_err ebb_cl_moe_mmql_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                              const struct ebb_cl_tuning *tu, struct ebb_cl_moe_mmql *out,
                              struct ebb_diag *diag)
{
    *out = (struct ebb_cl_moe_mmql){0};
    uint32_t pt[4];
    ebb_cl_mmql_tile(tu, ebb_cl_mmql_group_kind(l), pt);
    if (!tu->mm_mma || !tu->mmq || !tu->mmq_stage || !ebb_cl_layout_has_qw(l, tu) ||
        ebb_cl_mmql_bytes(pt[0], pt[1], pt[2], pt[3]) > 48 * 1024)
        return EBB_OK;
    struct ebb_cl_tuning tt = *tu;
    tt.mms_t = pt[0];
    tt.mms_mi = pt[1];
    tt.mms_w = pt[2];
    tt.mms_kb = pt[3];
    char pro[2048];
    const char *srcs[2 + N_OF(ebb__cl_wprog_srcs)] = {pro, "#define MQL_G 1\n"};
    cl_program prog = NULL;
    ebb_err rc;
    if ((rc = ebb_cl_layout_prologue(l, &tt, pro, sizeof(pro), diag)) ||
        (rc = ebb__cl_sources_get(ebb__cl_wprog_srcs, ebb__cl_n_wprog_srcs, srcs + 2, diag)))
        return rc;
    if (!(rc = ebb_cl_program_build(cl, srcs, N_OF(srcs), "-cl-mad-enable", &prog, diag)) &&
        !(rc = ebb_cl_kernel(prog, "moe_group_mmql", &out->group, diag)) &&
        !(rc = ebb_cl_kernel(prog, "mmq_quantize", &out->quantize, diag)))
        rc = ebb_cl_kernel(prog, "mmq_quantize_glu", &out->quantize_glu, diag);
    if (prog)
        clReleaseProgram(prog);
    ebb__cl_sources_put(srcs + 2, ebb__cl_n_wprog_srcs);
    if (rc)
        ebb_cl_moe_mmql_fini(out);
    else
        out->t = pt[0];
    return rc;
}

void ebb_cl_moe_mmql_fini(struct ebb_cl_moe_mmql *k)
{
    cl_kernel ks[] = {k->group, k->quantize, k->quantize_glu};
    for (size_t i = 0; i < N_OF(ks); i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    *k = (struct ebb_cl_moe_mmql){0};
}

ebb_err ebb_cl_ops_build(struct ebb_cl *cl, const struct ebb_cl_tuning *tu, uint32_t head_dim,
                         cl_program *out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char pro[512];
    const char *srcs[1 + N_OF(ebb__cl_ops_srcs)] = {pro};
    struct ebb_cl_tuning t = *tu;
    if (!ebb_cl_att_stage_fits(&t, head_dim, cl->info.local_mem))
        t.att_dasync = 0; /* decode attention's chunk through registers */
    if ((rc = ebb_cl_ops_prologue(&t, head_dim, pro, sizeof(pro), diag)) ||
        (rc = ebb__cl_sources_get(ebb__cl_ops_srcs, N_OF(ebb__cl_ops_srcs), srcs + 1, diag)))
        return rc;
    rc = ebb_cl_program_build(cl, srcs, N_OF(srcs), "-cl-mad-enable", out, diag);
    ebb__cl_sources_put(srcs + 1, N_OF(ebb__cl_ops_srcs));
    return rc;
}

ebb_err ebb_cl_moe_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                         const struct ebb_cl_tuning *tu, cl_program *out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char pro[2048], def[128];
    const char *srcs[2 + N_OF(ebb__cl_moe_srcs)] = {pro, def};
    /* moe_gate_up_q8's work-group, moe_down_q8's work-items a row, moe_router_q8's rows */
    snprintf(def, sizeof(def),
             "#define MOE_GU_WG %u\n#define MOE_DN_L %u\n#define MOE_RT_ROWS %u\n",
             ebb_cl_moe_gu_wg(tu), ebb_cl_moe_dn_l(tu), ebb_cl_moe_rt_rows(tu));
    if ((rc = ebb_cl_layout_prologue(l, tu, pro, sizeof(pro), diag)) ||
        (rc = ebb__cl_sources_get(ebb__cl_moe_srcs, N_OF(ebb__cl_moe_srcs), srcs + 2, diag)))
        return rc;
    rc = ebb_cl_program_build(cl, srcs, N_OF(srcs), "-cl-mad-enable", out, diag);
    ebb__cl_sources_put(srcs + 2, N_OF(ebb__cl_moe_srcs));
    return rc;
}

uint32_t ebb_cl_moe_gu_wg(const struct ebb_cl_tuning *tu)
{
    return tu->moe_gu_wg == 512 || tu->moe_gu_wg == 1024 ? tu->moe_gu_wg : 256;
}

uint32_t ebb_cl_moe_dn_l(const struct ebb_cl_tuning *tu)
{
    return tu->moe_dn_l ? tu->moe_dn_l : tu->mv_wg;
}

uint32_t ebb_cl_moe_rt_rows(const struct ebb_cl_tuning *tu)
{
    uint32_t teams = tu->mv_wg ? EBB_CL_Q8_WG / tu->mv_wg : 1,
             r = tu->moe_rt_rows ? tu->moe_rt_rows : 2;
    return r < teams ? r : teams ? teams : 1;
}

void ebb_cl_q8_shape(const struct ebb_cl_tuning *tu, uint32_t n_out, size_t g[2], size_t l[2])
{
    /* (without PTX matvec_q8 shares the matvec's row reduction, so its shape) */
    bool own = tu->mv_ptx && tu->mvq_wg;
    size_t wg = own ? tu->mvq_wg : tu->mv_wg, rows = own ? tu->mvq_rows : tu->mv_rows;
    g[0] = (size_t)n_out * wg, g[1] = 1;
    l[0] = wg * rows, l[1] = 1;
}

uint32_t ebb_cl_qin_wg(const struct ebb_cl_tuning *tu)
{
    /* (the prologue's MVQ_WG) */
    uint32_t wg = tu->mv_ptx && tu->mvq_wg ? tu->mvq_wg : tu->mv_wg;
    uint32_t l = wg * (tu->qin_rows ? tu->qin_rows : 1);
    if (!tu->qin || !tu->mv_q8 || (tu->mv_ptx && l % 32))
        return 0;
    return l;
}

void ebb_cl_qin_shape(const struct ebb_cl_tuning *tu, uint32_t n_out, size_t g[2], size_t l[2])
{
    size_t rows = tu->qin_rows ? tu->qin_rows : 1;
    l[0] = ebb_cl_qin_wg(tu), l[1] = 1;
    g[0] = ((size_t)n_out + rows - 1) / rows * l[0], g[1] = 1;
}

void ebb_cl_mmq_quantize_shape(uint32_t n_in, uint32_t nt, size_t g[2], size_t l[2])
{
    l[0] = 64, l[1] = 1;
    g[0] = ((size_t)n_in / 4 + 63) / 64 * 64, g[1] = nt;
}

void ebb_cl_qin_local(uint32_t n_in, size_t *xl_bytes, size_t *dl_bytes)
{
    *xl_bytes = n_in;
    *dl_bytes = (size_t)n_in / 32 * 2 * sizeof(float);
}

bool ebb_cl_qin_fits(const struct ebb_cl_tuning *tu, uint64_t local_mem, uint32_t n_in,
                     uint32_t n_out, int glu)
{
    uint32_t l = ebb_cl_qin_wg(tu);
    if (tu->qin_out_max && n_out > tu->qin_out_max)
        return false;
    if (!l || tu->qin < (glu ? 2u : 1u) || !n_in || n_in % 32 ||
        (tu->qin_max && n_in > tu->qin_max))
        return false;
    size_t xl, dl;
    ebb_cl_qin_local(n_in, &xl, &dl);
    /* the kernel's own arrays: the norm's EBB_CL_Q8_WG partials and the rows' sums */
    uint64_t own = (uint64_t)EBB_CL_Q8_WG * 4 + (uint64_t)l * 4;
    return (uint64_t)xl + dl + own <= local_mem;
}

void ebb_cl_wkernel_shape(const struct ebb_cl_tuning *tu, enum ebb_cl_wkernel k, uint32_t n_out,
                          uint32_t nt, size_t g[2], size_t l[2])
{
    size_t by_t = (nt + tu->mm_t - 1) / tu->mm_t;
    switch (k) {
    case EBB_CL_WK_GEMM:
        g[0] = 256 * (size_t)((n_out + 63) / 64), g[1] = (nt + 63) / 64;
        l[0] = 256;
        break;
    case EBB_CL_WK_MMA:
        g[0] = 256 * (size_t)((n_out + tu->mma_r - 1) / tu->mma_r);
        g[1] = (nt + tu->mma_t - 1) / tu->mma_t;
        l[0] = 256;
        break;
    case EBB_CL_WK_MMS:
    case EBB_CL_WK_MMP: {
        bool pf = k == EBB_CL_WK_MMP;
        uint32_t mi = pf ? tu->mmp_mi : tu->mms_mi, tt = pf ? tu->mmp_t : tu->mms_t,
                 w = pf ? tu->mmp_w : tu->mms_w;
        size_t r = 16 * (size_t)(mi ? mi : 1), t = tt ? tt : 32;
        size_t wg = 32 * (size_t)(w ? w : 8);
        g[0] = wg * ((n_out + r - 1) / r), g[1] = (nt + t - 1) / t;
        l[0] = wg;
        break;
    }
    case EBB_CL_WK_MMQ:
    case EBB_CL_WK_MMQS: {
        bool pf = k == EBB_CL_WK_MMQ;
        uint32_t mi = pf ? tu->mmq_mi : tu->mms_mi, tt = pf ? tu->mmq_t : tu->mms_t,
                 w = pf ? tu->mmq_w : tu->mms_w;
        size_t r = 16 * (size_t)(mi ? mi : 1), t = tt ? tt : 32;
        size_t wg = 32 * (size_t)(w ? w : 8);
        g[0] = wg * ((nt + t - 1) / t), g[1] = (n_out + r - 1) / r;
        l[0] = wg;
        break;
    }
    case EBB_CL_WK_MMQL:
    case EBB_CL_WK_MMQLK:
    case EBB_CL_WK_MMQLK5:
    case EBB_CL_WK_MMQLK6:
    case EBB_CL_WK_MMQLB:
    case EBB_CL_WK_MMQLB6:
    case EBB_CL_WK_MMQLS: {
        uint32_t tile[4];
        ebb_cl_mmql_tile(tu, k, tile);
        uint32_t tt = tile[0], mi = tile[1], w = tile[2];
        size_t wg = 32 * (size_t)(w ? w : 4), r = 16 * (size_t)(mi ? mi : 1) * (wg / 32);
        size_t t = tt ? tt : 64;
        g[0] = wg * ((nt + t - 1) / t), g[1] = (n_out + r - 1) / r;
        l[0] = wg;
        break;
    }
    case EBB_CL_WK_MATMUL:
        g[0] = n_out, g[1] = by_t;
        l[0] = tu->mm_wg;
        break;
    case EBB_CL_WK_MVCPU: {
        size_t r = tu->mv_cpu_r ? tu->mv_cpu_r : 4;
        g[0] = (n_out + r - 1) / r, g[1] = nt;
        l[0] = tu->mv_rows;
        break;
    }
    case EBB_CL_WK_COOP:
    case EBB_CL_WK_MATVEC:
        g[0] = (size_t)n_out * tu->mv_wg, g[1] = k == EBB_CL_WK_COOP ? by_t : nt;
        l[0] = (size_t)tu->mv_wg * tu->mv_rows;
        break;
    }
    l[1] = 1;
}
