/* The 8-bit inputs of decode on OpenCL (tu.mv_q8), shared by the dense products
 * (model-cl-layer.c) and the experts (model-cl-moe.c). */
#include "model-cl-int.h"

/* Decode with 8-bit inputs (tu.mv_q8): quantize_x8 folds the norm (nw) and SwiGLU (glu) into
 * x's first n_in inputs and quantizes them once into m->xq / m->xd ... */
ebb_err ebb__clm_q8_quantize(struct clm *m, cl_mem x, int n_in, cl_mem nw, int glu,
                             struct ebb_diag *diag)
{
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg qa[] = {EBB_CL_ARG(x),   EBB_CL_ARG(n_in),  EBB_CL_ARG(nw),   EBB_CL_ARG(eps),
                              EBB_CL_ARG(glu), EBB_CL_ARG(m->xq), EBB_CL_ARG(m->xd)};
    size_t qg = ((size_t)n_in + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, ql = EBB_CL_Q8_WG;
    ebb_err rc = ebb_cl_set_args(m->k_q8, 0, qa, 7, diag);
    return rc ? rc : ebb_cl_run(m->cl, m->k_q8, 1, &qg, &ql, diag);
}
