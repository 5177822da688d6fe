/* ebb bench --stages: the OpenCL engine's device time of the measured runs, by kernel and by
 * stage (attention, weight products, norms and activations, other), next to the runs' wall
 * time, so a bench table can say where the time went at a given depth. */
#ifndef EBB_DAEMON_BENCH_STAGES_H
#define EBB_DAEMON_BENCH_STAGES_H

#include <jansson.h>
#include <stdio.h>

#include "cl/cl.h"

enum ebb_bench_stage {
    EBB_BENCH_ATTENTION, /* attn_*, rope*, kv_*: attention and the KV cache's writes */
    EBB_BENCH_PRODUCTS,  /* matvec*, matmul*, moe_*, quantize*: weight products, their inputs */
    EBB_BENCH_NORMS,     /* rmsnorm*, head_norm, swiglu, geglu, add*, softmax */
    EBB_BENCH_OTHER,     /* anything else (get_rows, copies) */
    EBB_BENCH_N_STAGES
};

/* The stage a kernel name belongs to, and the stage's name ("attention"). */
enum ebb_bench_stage ebb_bench_stage_of(const char *kernel);
const char *ebb_bench_stage_name(enum ebb_bench_stage s);

#define EBB_BENCH_MAX_KERNELS 128

/* Device time summed over the measured runs of one phase (prefill or decode). */
struct ebb_bench_stages {
    unsigned long runs;
    double wall_ms;                                 /* the runs' wall time, summed */
    double ms[EBB_BENCH_N_STAGES];                  /* device time by stage, summed */
    unsigned long n[EBB_BENCH_N_STAGES];            /* launches by stage */
    struct ebb_cl_profile k[EBB_BENCH_MAX_KERNELS]; /* by kernel name, summed */
    size_t n_k;
};

/* Adds one run: its wall time and its kernels as ebb_cl_profile_take gave them. */
void ebb_bench_stages_add(struct ebb_bench_stages *s, double wall_ms,
                          const struct ebb_cl_profile *tab, size_t n);

/* Adds one run: the launches since ebb_cl_profile_begin (ebb_cl_profile_take's errors) and the
 * run's wall time. */
ebb_err ebb_bench_stages_take(struct ebb_bench_stages *s, double wall_ms, struct ebb_diag *d);

/* The two phases as text lines (per run: ms and share of the wall time per stage, the time
 * outside kernels, the five costliest kernels), and as a JSON object ({"prefill": {...},
 * "decode": {...}}, new reference). */
void ebb_bench_stages_print(FILE *f, const struct ebb_bench_stages *pf,
                            const struct ebb_bench_stages *dec);
json_t *ebb_bench_stages_json(const struct ebb_bench_stages *pf,
                              const struct ebb_bench_stages *dec);

/* One more phase under its own name (--batch's decode steps: "batch"), as text lines like the
 * two above, and as the JSON object of one phase. */
void ebb_bench_stages_print_phase(FILE *f, const char *phase, const struct ebb_bench_stages *s);
json_t *ebb_bench_stages_phase_json(const struct ebb_bench_stages *s);

#endif
