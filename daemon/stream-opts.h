/* Layer-streamer and layer-split options shared by `ebb run` and `ebb bench` (docs/STREAMER.md,
 * docs/SCALING.md), and the peak RSS both report. */
#ifndef EBB_DAEMON_STREAM_OPTS_H
#define EBB_DAEMON_STREAM_OPTS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

enum {
    EBB_SOPT_BUDGET = 512,
    EBB_SOPT_PREFETCH,
    EBB_SOPT_MODE,
    EBB_SOPT_PACK,
    EBB_SOPT_RESIDENCY,
    EBB_SOPT_IO,
    EBB_SOPT_THREADS,
    EBB_SOPT_HOST_LAYERS,
    EBB_SOPT_HOST_THREADS,
    EBB_SOPT_HOST_Q8,
    EBB_SOPT_EXPERT_CACHE,
    EBB_SOPT_SPLIT,
    EBB_SOPT_TENSOR_SPLIT,
};

#define EBB_STREAM_LONGOPTS                                                                        \
    {"memory-budget", required_argument, NULL, EBB_SOPT_BUDGET},                                   \
        {"prefetch", required_argument, NULL, EBB_SOPT_PREFETCH},                                  \
        {"residency-mode", required_argument, NULL, EBB_SOPT_MODE},                                \
        {"pack", required_argument, NULL, EBB_SOPT_PACK},                                          \
        {"residency", required_argument, NULL, EBB_SOPT_RESIDENCY},                                \
        {"stream-io", required_argument, NULL, EBB_SOPT_IO},                                       \
        {"host-layers", required_argument, NULL, EBB_SOPT_HOST_LAYERS},                            \
        {"host-threads", required_argument, NULL, EBB_SOPT_HOST_THREADS},                          \
        {"host-q8", no_argument, NULL, EBB_SOPT_HOST_Q8},                                          \
        {"expert-cache", required_argument, NULL, EBB_SOPT_EXPERT_CACHE},                          \
        {"split", required_argument, NULL, EBB_SOPT_SPLIT},                                        \
        {"tensor-split", required_argument, NULL, EBB_SOPT_TENSOR_SPLIT},                          \
    {                                                                                              \
        "stream-threads", required_argument, NULL, EBB_SOPT_THREADS                                \
    }

/* The help lines of those options. */
extern const char ebb_stream_opts_usage[];

/* True if c is one of the EBB_SOPT_* options. */
static inline bool ebb_stream_opt_is(int c)
{
    return c >= EBB_SOPT_BUDGET && c <= EBB_SOPT_TENSOR_SPLIT;
}

/* Applies option c with value arg (NULL for a flag) to mp's streamer fields; false on a bad
 * value. */
bool ebb_stream_opt_apply(int c, const char *arg, struct ebb_model_params *mp);

/* Peak resident set size of this process (VmHWM of /proc/self/status) in bytes; 0 if unknown. */
uint64_t ebb_peak_rss(void);

#endif
