/* Memory pressure notifications for the layer streamer: the kernel tells us when the memory
 * cgroup we run in starts reclaiming hard, so that the planner re-reads the probes and re-plans
 * at the next step instead of at the next probe period.
 *
 * Sources, the first that can be armed:
 *  - cgroup v1: memory.pressure_level through cgroup.event_control, one eventfd per level
 *    ("medium", "critical"), on the process's group and on every ancestor up to the mount that
 *    has a limit (the kernel signals the group whose limit is reclaiming, then its ancestors);
 *  - cgroup v2: PSI triggers on the group's memory.pressure ("some 150 ms in 1 s" for medium,
 *    "full 100 ms in 1 s" for critical), woken through poll(POLLPRI);
 *  - no memory cgroup: the same triggers on /proc/pressure/memory (windows of 2 s, which the
 *    kernel also accepts from unprivileged processes).
 * Nothing here allocates after open; one thread waits, any thread may stop it. */
#ifndef EBB_RUNTIME_MEMPRESSURE_H
#define EBB_RUNTIME_MEMPRESSURE_H

#include <stddef.h>

#include "base/err.h"
#include "memprobe.h"

enum ebb_mempressure_level {
    EBB_MEMPRESSURE_NONE = 0,
    EBB_MEMPRESSURE_MEDIUM = 1,   /* v1 "medium", PSI "some" trigger */
    EBB_MEMPRESSURE_CRITICAL = 2, /* v1 "critical", PSI "full" trigger */
};

struct ebb_mempressure;

/* Arms notifications for the probe set's memory cgroup (ebb_memprobe_cgroup; the probe set must
 * outlive nothing here, paths are copied). Where nothing can be armed (no v1 pressure_level, no
 * PSI, not allowed to register) it returns EBB_EUNSUPPORTED with the reason in diag; callers go on
 * without notifications, probing on their period as before. */
ebb_err ebb_mempressure_open(const struct ebb_memprobe *mp, struct ebb_mempressure **out,
                             struct ebb_diag *diag);

/* Closes the files (the kernel drops the v1 registrations with their eventfds); accepts NULL.
 * No thread may be waiting. */
void ebb_mempressure_close(struct ebb_mempressure *w);

/* What is armed, one line: "cgroup v1 /x memory.pressure_level medium,critical". */
const char *ebb_mempressure_describe(const struct ebb_mempressure *w);

/* Waits up to timeout_ms (-1: no limit) for a notification. Returns the highest level that
 * fired (its counters are cleared), EBB_MEMPRESSURE_NONE on timeout, or -1 once
 * ebb_mempressure_stop was called (and from then on). One thread at a time. */
int ebb_mempressure_wait(struct ebb_mempressure *w, int timeout_ms);

/* Any thread: makes the current and every later ebb_mempressure_wait return -1. */
void ebb_mempressure_stop(struct ebb_mempressure *w);

/* The level's name ("medium", "critical", "none"). */
const char *ebb_mempressure_level_name(int level);

#endif
