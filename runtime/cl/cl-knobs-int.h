/* Inside the tuning knobs (cl-knobs.c, cl-knobs-table.c): the table's types and the table. */
#ifndef EBB_CL_KNOBS_INT_H
#define EBB_CL_KNOBS_INT_H

#include "cl-knobs.h"

/* The kinds of device a default is given for; a later row of a knob's defaults that matches the
 * device wins over an earlier one. */
enum kclass {
    DC_ANY = 0,
    DC_CPU,    /* CPU devices (PoCL) */
    DC_GPU,    /* GPUs of any vendor */
    DC_AMD,    /* AMD GPUs */
    DC_NVIDIA, /* NVIDIA GPUs */
    DC_ARM,    /* ARM and Apple GPUs */
    DC_IDP,    /* devices listing cl_khr_integer_dot_product with packed 4 x 8-bit inputs */
};

enum { T_TUNING, T_ENV };
#define NONE (-1)

/* One comma-separated part of a knob's value ("x" separates too: 128x64): the field it sets
 * (NONE: checked only) and what it accepts: "A..B", "pow2 A..B" (a power of two in the range),
 * "A..B step S" (a multiple of S in it) or "a|b|c" (those numbers). */
struct kpart {
    int off;
    const char *field;
    const char *accept;
};

struct kdef {
    enum kclass c;
    uint32_t v[4];
};

struct knob {
    const char *name;  /* after EBB_CL_ */
    int where;         /* T_TUNING or T_ENV: the struct the parts' fields are in */
    const char *words; /* non-NULL: the value is one of these words ("tile|coop|gemm"), stored
                          as its index in part 0, whose accept is then "0..n-1" */
    int n_parts, min_parts;
    struct kpart part[4];
    struct kdef def[4];
    /* Optional: set the fields from the parts (knobs that stand for several fields), and read
     * them back for printing; a device-dependent check (NULL reason: fine). */
    void (*set)(struct ebb_cl_tuning *t, const uint32_t *v);
    void (*get)(const struct ebb_cl_tuning *t, uint32_t *v);
    const char *set_fields; /* with set: the fields it sets, for the docs */
    const char *(*check)(const uint32_t *v, const struct ebb_cl_dev_info *di);
    const char *doc;
};

/* The names of enum kclass's kinds, for the docs and `ebb info --knobs`. */
extern const char *const ebb__cl_class_names[];

/* The table (cl-knobs-table.c), in the order the knobs are applied; it holds at most
 * EBB_CL_KNOBS_MAX knobs (checked where it is defined). */
#define EBB_CL_KNOBS_MAX 96
extern const struct knob ebb__cl_knobs[];
extern const size_t ebb__cl_n_knobs;

#endif
