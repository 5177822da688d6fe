/* ebb bench --stages: kernel names grouped into stages, summed over runs, and reported. The
 * device times come from runtime/cl's caller profile (queue timestamps, start to end of each
 * launch); the wall time is the bench's own clock around the same evaluation, so the time
 * outside kernels (launch gaps, host work, reading results) is their difference. */
#include "bench-stages.h"

#include <stdlib.h>
#include <string.h>

static bool starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

enum ebb_bench_stage ebb_bench_stage_of(const char *k)
{
    if (starts(k, "attn_") || starts(k, "rope") || starts(k, "kv_"))
        return EBB_BENCH_ATTENTION;
    if (starts(k, "matvec") || starts(k, "matmul") || starts(k, "moe_") || starts(k, "quantize"))
        return EBB_BENCH_PRODUCTS;
    if (starts(k, "rmsnorm") || !strcmp(k, "head_norm") || !strcmp(k, "swiglu") ||
        !strcmp(k, "geglu") || starts(k, "add") || !strcmp(k, "softmax"))
        return EBB_BENCH_NORMS;
    return EBB_BENCH_OTHER;
}

const char *ebb_bench_stage_name(enum ebb_bench_stage s)
{
    static const char *const names[] = {"attention", "products", "norms", "other"};
    return s < EBB_BENCH_N_STAGES ? names[s] : "?";
}

void ebb_bench_stages_add(struct ebb_bench_stages *s, double wall_ms,
                          const struct ebb_cl_profile *tab, size_t n)
{
    s->runs++;
    s->wall_ms += wall_ms;
    for (size_t i = 0; i < n; i++) {
        enum ebb_bench_stage st = ebb_bench_stage_of(tab[i].name);
        s->ms[st] += tab[i].ms;
        s->n[st] += tab[i].n;
        size_t j = 0;
        while (j < s->n_k && strcmp(s->k[j].name, tab[i].name))
            j++;
        if (j == s->n_k) {
            if (j == EBB_BENCH_MAX_KERNELS) /* counted in its stage, not listed */
                continue;
            s->k[s->n_k++] = (struct ebb_cl_profile){.ms = 0};
            memcpy(s->k[j].name, tab[i].name, sizeof(s->k[j].name));
        }
        s->k[j].ms += tab[i].ms;
        s->k[j].n += tab[i].n;
    }
}

ebb_err ebb_bench_stages_take(struct ebb_bench_stages *s, double wall_ms, struct ebb_diag *d)
{
    static struct ebb_cl_profile tab[EBB_BENCH_MAX_KERNELS];
    size_t n = 0;
    ebb_err rc = ebb_cl_profile_take(tab, EBB_BENCH_MAX_KERNELS, &n, d);
    if (!rc)
        ebb_bench_stages_add(s, wall_ms, tab, n);
    return rc;
}

static double kernel_ms(const struct ebb_bench_stages *s)
{
    double t = 0;
    for (int i = 0; i < EBB_BENCH_N_STAGES; i++)
        t += s->ms[i];
    return t;
}

/* Time outside kernels: negative only through clock skew between host and device. */
static double outside_ms(const struct ebb_bench_stages *s)
{
    double o = s->wall_ms - kernel_ms(s);
    return o > 0 ? o : 0;
}

static double share(double part, double whole)
{
    return whole > 0 ? 100.0 * part / whole : 0;
}

static int by_ms_desc(const void *a, const void *b)
{
    double x = ((const struct ebb_cl_profile *)a)->ms, y = ((const struct ebb_cl_profile *)b)->ms;
    return (x < y) - (x > y);
}

/* The kernels of s, costliest first (a sorted copy). */
static struct ebb_cl_profile *sorted_kernels(const struct ebb_bench_stages *s)
{
    struct ebb_cl_profile *k = malloc(sizeof(*k) * (s->n_k ? s->n_k : 1));
    if (k) {
        memcpy(k, s->k, sizeof(*k) * s->n_k);
        qsort(k, s->n_k, sizeof(*k), by_ms_desc);
    }
    return k;
}

static void print_phase(FILE *f, const char *phase, const struct ebb_bench_stages *s)
{
    double r = s->runs ? (double)s->runs : 1, wall = s->wall_ms / r;
    fprintf(f, "  %-8s %10.2f ms a run (wall), %.2f ms in kernels\n", phase, wall,
            kernel_ms(s) / r);
    for (int i = 0; i < EBB_BENCH_N_STAGES; i++)
        fprintf(f, "    %-12s %10.2f ms %5.1f%%  %8.1f launches\n",
                ebb_bench_stage_name((enum ebb_bench_stage)i), s->ms[i] / r,
                share(s->ms[i] / r, wall), (double)s->n[i] / r);
    fprintf(f, "    %-12s %10.2f ms %5.1f%%  (launch gaps, host work, reads)\n", "outside",
            outside_ms(s) / r, share(outside_ms(s) / r, wall));
    struct ebb_cl_profile *k = sorted_kernels(s);
    for (size_t i = 0; k && i < s->n_k && i < 5; i++)
        fprintf(f, "    kernel %-24s %10.2f ms %5.1f%%  (%s)\n", k[i].name, k[i].ms / r,
                share(k[i].ms / r, wall), ebb_bench_stage_name(ebb_bench_stage_of(k[i].name)));
    free(k);
}

void ebb_bench_stages_print(FILE *f, const struct ebb_bench_stages *pf,
                            const struct ebb_bench_stages *dec)
{
    fprintf(f, "stages     device time by stage per measured run (share of the run's wall time)\n");
    print_phase(f, "prefill", pf);
    if (dec->runs && dec->wall_ms > 0)
        print_phase(f, "decode", dec);
}

static json_t *phase_json(const struct ebb_bench_stages *s)
{
    double r = s->runs ? (double)s->runs : 1, wall = s->wall_ms / r;
    json_t *st = json_object(), *ks = json_array();
    for (int i = 0; i < EBB_BENCH_N_STAGES; i++)
        json_object_set_new(st, ebb_bench_stage_name((enum ebb_bench_stage)i),
                            json_pack("{s:f, s:f, s:f}", "ms", s->ms[i] / r, "share",
                                      share(s->ms[i] / r, wall) / 100.0, "launches",
                                      (double)s->n[i] / r));
    json_object_set_new(st, "outside",
                        json_pack("{s:f, s:f}", "ms", outside_ms(s) / r, "share",
                                  share(outside_ms(s) / r, wall) / 100.0));
    struct ebb_cl_profile *k = sorted_kernels(s);
    for (size_t i = 0; k && i < s->n_k; i++)
        json_array_append_new(ks, json_pack("{s:s, s:s, s:f, s:f}", "name", k[i].name, "stage",
                                            ebb_bench_stage_name(ebb_bench_stage_of(k[i].name)),
                                            "ms", k[i].ms / r, "launches", (double)k[i].n / r));
    free(k);
    return json_pack("{s:I, s:f, s:f, s:o, s:o}", "runs", (json_int_t)s->runs, "wall_ms", wall,
                     "kernel_ms", kernel_ms(s) / r, "stages", st, "kernels", ks);
}

json_t *ebb_bench_stages_json(const struct ebb_bench_stages *pf, const struct ebb_bench_stages *dec)
{
    return json_pack("{s:o, s:o}", "prefill", phase_json(pf), "decode", phase_json(dec));
}

void ebb_bench_stages_print_phase(FILE *f, const char *phase, const struct ebb_bench_stages *s)
{
    if (s->runs && s->wall_ms > 0)
        print_phase(f, phase, s);
}

json_t *ebb_bench_stages_phase_json(const struct ebb_bench_stages *s)
{
    return phase_json(s);
}
