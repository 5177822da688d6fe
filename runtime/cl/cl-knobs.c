/* The tuning knobs: the table of the EBB_CL_* variables (cl-knobs-table.c) resolved into struct
 * ebb_cl_tuning and struct ebb_cl_env, checked, printed and documented from that table alone
 * (cl-knobs.h). */
#include "cl-knobs-int.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum ksrc { S_DEFAULT, S_VENDOR, S_ENV };
static const char *const src_names[] = {"default", "vendor default", "environment"};

static bool matches(enum kclass c, const struct ebb_cl_dev_info *di)
{
    switch (c) {
    case DC_ANY:
        return true;
    case DC_CPU:
        return di->is_cpu;
    case DC_GPU:
        return di->is_gpu;
    case DC_AMD:
        return di->is_gpu && di->vendor == EBB_CL_VENDOR_AMD;
    case DC_NVIDIA:
        return di->is_gpu && di->vendor == EBB_CL_VENDOR_NVIDIA;
    case DC_ARM:
        return di->is_gpu && (di->vendor == EBB_CL_VENDOR_ARM || di->vendor == EBB_CL_VENDOR_APPLE);
    case DC_IDP:
        return di->idp;
    }
    return false;
}

/* k's default for di into v; its kind of source. */
static enum ksrc knob_default(const struct knob *k, const struct ebb_cl_dev_info *di, uint32_t *v)
{
    enum ksrc s = S_DEFAULT;
    memcpy(v, k->def[0].v, sizeof(k->def[0].v));
    for (int i = 1; i < 4 && k->def[i].c != DC_ANY; i++)
        if (di && matches(k->def[i].c, di)) {
            memcpy(v, k->def[i].v, sizeof(k->def[i].v));
            s = S_VENDOR;
        }
    return s;
}

/* Whether v is accepted by spec ("A..B", "pow2 A..B", "a|b|c"). */
static bool accepts(const char *spec, uint32_t v)
{
    bool pow2 = !strncmp(spec, "pow2 ", 5);
    const char *p = pow2 ? spec + 5 : spec;
    const char *dots = strstr(p, "..");
    if (dots) {
        unsigned long lo = strtoul(p, NULL, 10), hi = strtoul(dots + 2, NULL, 10);
        const char *st = strstr(p, " step ");
        unsigned long step = st ? strtoul(st + 6, NULL, 10) : 1;
        return v >= lo && v <= hi && (!pow2 || !(v & (v - 1))) && v % step == 0;
    }
    while (*p) {
        char *end;
        if (strtoul(p, &end, 10) == v && end != p)
            return true;
        p = *end == '|' ? end + 1 : end + strlen(end);
    }
    return false;
}

/* The accepted values of k in words for messages and the docs: "64|128,32|64|128[,...]". */
static void accepted(const struct knob *k, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    if (k->words) {
        snprintf(buf, cap, "%s", k->words);
        return;
    }
    for (int i = 0; i < k->n_parts; i++) {
        const char *a = k->part[i].accept;
        bool pow2 = !strncmp(a, "pow2 ", 5);
        const char *st = strstr(a, " step ");
        char step[48] = "";
        if (st)
            snprintf(step, sizeof(step), " (a multiple of %s)", st + 6);
        int w = snprintf(buf + n, cap - n, "%s%s%.*s%s%s", i >= k->min_parts ? "[" : "",
                         i ? "," : "", (int)(st ? (size_t)(st - a) : strlen(a)) - (pow2 ? 5 : 0),
                         pow2 ? a + 5 : a, pow2 ? " (a power of two)" : "", step);
        if (w < 0 || (size_t)w >= cap - n)
            return;
        n += (size_t)w;
    }
    for (int i = k->min_parts; i < k->n_parts && n + 1 < cap; i++)
        buf[n++] = ']', buf[n] = 0;
}

/* Parses s as k's value into v (parts not given keep v's); NULL, or why not. */
static const char *parse(const struct knob *k, const char *s, uint32_t *v)
{
    if (k->words) {
        const char *w = k->words;
        for (uint32_t i = 0; *w; i++) {
            size_t n = strcspn(w, "|");
            if (strlen(s) == n && !strncmp(s, w, n)) {
                v[0] = i;
                return NULL;
            }
            w += n + (w[n] == '|');
        }
        return "not one of the accepted words";
    }
    uint32_t got[4];
    int n = 0;
    const char *p = s;
    for (;;) {
        if (*p < '0' || *p > '9')
            return "not a number";
        char *end;
        unsigned long x = strtoul(p, &end, 10);
        if (n == k->n_parts)
            return "too many parts";
        if (x > UINT32_MAX || !accepts(k->part[n].accept, (uint32_t)x))
            return k->n_parts > 1 ? "a part out of range" : "out of range";
        got[n++] = (uint32_t)x;
        if (!*end)
            break;
        if (*end != ',' && *end != 'x')
            return "not a number";
        p = end + 1;
    }
    if (n < k->min_parts)
        return "too few parts";
    memcpy(v, got, sizeof(got[0]) * (size_t)n);
    return NULL;
}

/* k's value from the environment into v (over its default) when set; 1 when set and good, 0
 * unset, -1 bad (why in *why). */
static int from_env(const struct knob *k, const struct ebb_cl_dev_info *di, uint32_t *v,
                    const char **why, const char **raw)
{
    char name[64];
    snprintf(name, sizeof(name), "EBB_CL_%s", k->name);
    const char *s = getenv(name);
    *raw = s;
    if (!s || !*s)
        return 0;
    uint32_t tmp[4];
    memcpy(tmp, v, sizeof(tmp));
    if ((*why = parse(k, s, tmp)) || (k->check && (*why = k->check(tmp, di))))
        return -1;
    memcpy(v, tmp, sizeof(tmp));
    return 1;
}

static void put(const struct knob *k, void *base, const uint32_t *v)
{
    if (k->set) {
        k->set(base, v);
        return;
    }
    for (int i = 0; i < k->n_parts; i++)
        if (k->part[i].off != NONE)
            memcpy((char *)base + k->part[i].off, &v[i], sizeof(uint32_t));
}

static void get(const struct knob *k, const void *base, uint32_t *v)
{
    memset(v, 0, 4 * sizeof(uint32_t));
    if (k->get) {
        k->get(base, v);
        return;
    }
    for (int i = 0; i < k->n_parts; i++)
        if (k->part[i].off != NONE)
            memcpy(&v[i], (const char *)base + k->part[i].off, sizeof(uint32_t));
        else
            v[i] = k->def[0].v[i];
}

/* The values no knob sets, by kind of device. */
static struct ebb_cl_tuning base_tuning(const struct ebb_cl_dev_info *di)
{
    struct ebb_cl_tuning t = {
        .mm_k = 128,
        .mm_wg = di->is_gpu ? 64 : 16,
        .att_tq = di->is_gpu ? 32 : 8,
        .att_tk = 32,
        .mvu = 2,
        .mma_v = 1,
        .mv_h8 = 1,
        .q8r_fold = 1,
        .att_hnorm = 1,
        /* local memory that is ordinary memory buys nothing but barriers */
        .mm_local = !di->local_is_global,
    };
    return t;
}

/* What the device's limits and the knobs' dependencies make of the values (in this order). */
static void fit_device(struct ebb_cl_tuning *t, const struct ebb_cl_dev_info *di, bool norm_wg_env,
                       bool att_wg_env)
{
    if (!t->mv_cpu)
        t->mvcpu_max = 0;
    if (di->max_wg < 256)
        t->mm_gemm_min = 0, t->mm_mma = 0;
    if (di->vendor != EBB_CL_VENDOR_NVIDIA)
        t->mv_ptx = 0;
    if (t->mv_ptx)
        t->mv_idp = 0;
    if (di->max_wg < EBB_CL_Q8_WG)
        t->mv_q8 = 0;
    while (t->mv_wg * t->mv_rows > di->max_wg && t->mv_rows > 1)
        t->mv_rows /= 2;
    t->mvq_wg = t->mv_wg, t->mvq_rows = t->mv_rows;
    if (!t->qin_rows)
        t->qin_rows = t->mvq_rows;
    while ((uint64_t)t->mvq_wg * t->qin_rows > di->max_wg && t->qin_rows > 1)
        t->qin_rows /= 2;
    while (t->mm_wg > di->max_wg)
        t->mm_wg /= 2;
    while (t->norm_wg > di->max_wg)
        t->norm_wg /= 2;
    if (!att_wg_env && (!t->att_wg || norm_wg_env))
        t->att_wg = t->norm_wg;
    while (t->att_wg > di->max_wg)
        t->att_wg /= 2;
    while (t->att_tq > di->max_wg)
        t->att_tq /= 2;
    while (t->moe_gu_wg > 256 && t->moe_gu_wg > di->max_wg)
        t->moe_gu_wg /= 2;
    while (t->moe_dn_l > 32 && t->moe_dn_l > di->max_wg)
        t->moe_dn_l /= 2;
    /* local memory: matmul stages mm_t x mm_k floats; attention 2 x att_tk x head_dim (up to
     * 256) floats */
    while ((uint64_t)t->mm_t * t->mm_k * 4 > di->local_mem / 2 && t->mm_k > 32)
        t->mm_k /= 2;
    while ((uint64_t)2 * t->att_tk * 256 * 4 > di->local_mem / 2 && t->att_tk > 4)
        t->att_tk /= 2;
}

/* Resolves every knob of table part `where` into base for di (NULL: no device): first every
 * knob's default, then the environment's values over them, both in the table's order (so that
 * EBB_CL_GEMM_MIN set moves what EBB_CL_MM set). src[i] (may be NULL) gets knob i's source. A
 * bad value: EBB_EINVAL into diag when strict, else a note on stderr and the default. */
static ebb_err resolve(const struct ebb_cl_dev_info *di, int where, void *base, enum ksrc *src,
                       bool strict, struct ebb_diag *diag)
{
    for (size_t i = 0; i < ebb__cl_n_knobs; i++) {
        uint32_t v[4];
        if (ebb__cl_knobs[i].where != where)
            continue;
        enum ksrc s = knob_default(&ebb__cl_knobs[i], di, v);
        put(&ebb__cl_knobs[i], base, v);
        if (src)
            src[i] = s;
    }
    for (size_t i = 0; i < ebb__cl_n_knobs; i++) {
        const struct knob *k = &ebb__cl_knobs[i];
        if (k->where != where)
            continue;
        uint32_t v[4];
        knob_default(k, di, v);
        const char *why = NULL, *raw = NULL;
        int e = from_env(k, di, v, &why, &raw);
        if (e < 0) {
            char acc[160];
            accepted(k, acc, sizeof(acc));
            if (strict)
                return ebb_diag_set(diag, EBB_EINVAL, "EBB_CL_%s=%s: %s (accepted: %s)", k->name,
                                    raw, why, acc);
            fprintf(stderr, "ebb: EBB_CL_%s=%s: %s (accepted: %s); ignored\n", k->name, raw, why,
                    acc);
        } else if (e > 0) {
            put(k, base, v);
            if (src)
                src[i] = S_ENV;
        }
    }
    return EBB_OK;
}

static size_t knob_index(const char *name)
{
    for (size_t i = 0; i < ebb__cl_n_knobs; i++)
        if (!strcmp(ebb__cl_knobs[i].name, name))
            return i;
    return ebb__cl_n_knobs;
}

static struct ebb_cl_tuning tuning(const struct ebb_cl_dev_info *di, enum ksrc *src,
                                   struct ebb_cl_tuning *before)
{
    struct ebb_cl_tuning t = base_tuning(di);
    enum ksrc own[EBB_CL_KNOBS_MAX];
    enum ksrc *s = src ? src : own;
    resolve(di, T_TUNING, &t, s, false, NULL);
    if (before)
        *before = t;
    fit_device(&t, di, s[knob_index("NORM_WG")] == S_ENV, s[knob_index("ATT_WG")] == S_ENV);
    return t;
}

struct ebb_cl_tuning ebb_cl_tuning_for(const struct ebb_cl_dev_info *di)
{
    return tuning(di, NULL, NULL);
}

void ebb_cl_env_get(struct ebb_cl_env *out)
{
    struct ebb_cl_env e;
    memset(&e, 0, sizeof(e));
    resolve(NULL, T_ENV, &e, NULL, false, NULL);
    *out = e;
}

ebb_err ebb_cl_knobs_check(const struct ebb_cl_dev_info *di, struct ebb_diag *diag)
{
    struct ebb_cl_tuning t;
    struct ebb_cl_env e;
    ebb_err rc;
    memset(&t, 0, sizeof(t));
    memset(&e, 0, sizeof(e));
    if ((rc = resolve(di, T_TUNING, &t, NULL, true, diag)) ||
        (rc = resolve(di, T_ENV, &e, NULL, true, diag)))
        return rc;
    for (char **ev = environ; ev && *ev; ev++) {
        if (strncmp(*ev, "EBB_CL_", 7))
            continue;
        char name[64];
        size_t n = strcspn(*ev + 7, "=");
        snprintf(name, sizeof(name), "%.*s", (int)n, *ev + 7);
        if (knob_index(name) == ebb__cl_n_knobs)
            fprintf(stderr, "ebb: EBB_CL_%s is not a tuning knob (docs/TUNING.md); ignored\n",
                    name);
    }
    return EBB_OK;
}

/* A knob's value as it is written in the environment. */
static void format_value(const struct knob *k, const uint32_t *v, char *buf, size_t cap)
{
    if (k->words) {
        const char *w = k->words;
        for (uint32_t i = 0; i < v[0] && strchr(w, '|'); i++)
            w = strchr(w, '|') + 1;
        snprintf(buf, cap, "%.*s", (int)strcspn(w, "|"), w);
        return;
    }
    size_t n = 0;
    for (int i = 0; i < k->n_parts && n < cap; i++) {
        int w = snprintf(buf + n, cap - n, "%s%u", i ? "," : "", v[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

void ebb_cl_knobs_print(FILE *out, const struct ebb_cl_dev_info *di)
{
    enum ksrc src[EBB_CL_KNOBS_MAX];
    struct ebb_cl_tuning before;
    struct ebb_cl_tuning t = tuning(di, src, &before);
    struct ebb_cl_env e;
    memset(&e, 0, sizeof(e));
    resolve(di, T_ENV, &e, src, false, NULL);
    fprintf(out, "knobs for %s (%s); docs/TUNING.md describes them\n", di->name, di->platform);
    for (size_t i = 0; i < ebb__cl_n_knobs; i++) {
        const struct knob *k = &ebb__cl_knobs[i];
        uint32_t v[4], v0[4];
        char val[64], name[64], from[80];
        if (k->where == T_TUNING) {
            get(k, &t, v);
            get(k, &before, v0);
        } else {
            get(k, &e, v);
            memcpy(v0, v, sizeof(v));
        }
        format_value(k, v, val, sizeof(val));
        snprintf(name, sizeof(name), "EBB_CL_%s", k->name);
        uint32_t d[4];
        enum kclass c = DC_ANY;
        knob_default(k, di, d);
        for (int j = 1; j < 4 && k->def[j].c != DC_ANY; j++)
            if (matches(k->def[j].c, di))
                c = k->def[j].c;
        if (src[i] == S_VENDOR)
            snprintf(from, sizeof(from), "vendor default (%s)", ebb__cl_class_names[c]);
        else
            snprintf(from, sizeof(from), "%s", src_names[src[i]]);
        fprintf(out, "%-22s %-16s %s%s\n", name, val, from,
                memcmp(v, v0, sizeof(v)) ? ", then fitted to the device and the other knobs" : "");
    }
}

/* s as a Markdown table cell and its closing bar ('|' escaped). */
static void md_cell(FILE *out, const char *s)
{
    fputc(' ', out);
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', out);
        fputc(*s, out);
    }
    fputs(" |", out);
}

void ebb_cl_knobs_markdown(FILE *out)
{
    fputs("# Tuning knobs\n"
          "\n"
          "<!-- Generated from the knob table in runtime/cl/cl-knobs-table.c by `ebb info --knobs "
          "--markdown`;\n"
          "     do not edit. The test cli/knobs fails when this file and the table disagree. -->\n"
          "\n"
          "The OpenCL engine picks its kernel variants and shapes from the device (kind, vendor,\n"
          "work-group and local-memory limits). Each `EBB_CL_*` environment variable below "
          "overrides one\n"
          "choice, for measurements, tests and devices not yet measured; none is needed in normal "
          "use. A\n"
          "value outside the accepted ones is an error naming the knob (the engine does not "
          "start); a name\n"
          "that is not a knob gets a note on stderr. `ebb info --knobs [--device SPEC]` prints "
          "every knob's\n"
          "value for a device and where it came from (default, vendor default, environment; \"then "
          "fitted\"\n"
          "where the device's limits or other knobs changed it). Values of several parts are "
          "separated by\n"
          "`,` or `x` (`EBB_CL_MMA_TILE=128x64`); parts in brackets may be left out (they keep "
          "their\n"
          "defaults). The measurements behind the defaults are in docs/ENGINE.md and "
          "docs/PERFORMANCE.md.\n"
          "\n"
          "| knob | field | accepted | default | what |\n"
          "| --- | --- | --- | --- | --- |\n",
          out);
    for (size_t i = 0; i < ebb__cl_n_knobs; i++) {
        const struct knob *k = &ebb__cl_knobs[i];
        char acc[160], field[96] = "", defs[256];
        accepted(k, acc, sizeof(acc));
        if (k->set)
            snprintf(field, sizeof(field), "%s", k->set_fields);
        for (int j = 0; !k->set && j < k->n_parts; j++) {
            size_t n = strlen(field);
            if (k->part[j].field)
                snprintf(field + n, sizeof(field) - n, "%s`%s`", n ? ", " : "", k->part[j].field);
        }
        size_t n = 0;
        for (int j = 0; j < 4 && (j == 0 || k->def[j].c != DC_ANY); j++) {
            char val[64];
            format_value(k, k->def[j].v, val, sizeof(val));
            int w = snprintf(defs + n, sizeof(defs) - n, "%s%s%s%s", j ? "; " : "",
                             j ? ebb__cl_class_names[k->def[j].c] : "", j ? " " : "", val);
            if (w < 0 || (size_t)w >= sizeof(defs) - n)
                break;
            n += (size_t)w;
        }
        fprintf(out, "| `EBB_CL_%s` |", k->name);
        md_cell(out, field[0] ? field : "-");
        md_cell(out, acc);
        md_cell(out, defs);
        md_cell(out, k->doc);
        fputc('\n', out);
    }
    fputs("\n"
          "Besides the table: the engine lowers what a device cannot hold (work-groups to its "
          "limit,\n"
          "tiles to its local memory), keeps PTX to NVIDIA devices and integer dot products off "
          "where\n"
          "PTX is on, keeps the 8-bit path and the tensor cores off below work-groups of 256, and "
          "uses\n"
          "the tensor-core and integer-dot paths only after their start-up probes pass.\n",
          out);
}
