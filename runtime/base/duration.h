/* Go-style durations ("5m", "1h30m", "250ms", "-1"), as ollama's keep_alive and ebb's config
 * take them. One parser; each caller names the units it accepts, so the config file and the
 * request body keep their own syntax. */
#ifndef EBB_RUNTIME_DURATION_H
#define EBB_RUNTIME_DURATION_H

#include <stdbool.h>

/* Units a caller accepts, or-ed together. */
enum ebb_duration_unit {
    EBB_DURATION_NS = 1 << 0, /* "ns" */
    EBB_DURATION_US = 1 << 1, /* "us" and "µs" (UTF-8) */
    EBB_DURATION_MS = 1 << 2, /* "ms" */
    EBB_DURATION_S = 1 << 3,  /* "s" */
    EBB_DURATION_M = 1 << 4,  /* "m" */
    EBB_DURATION_H = 1 << 5,  /* "h" */
};

/* The config file's units (ms, s, m, h) and a request's keep_alive (Go's: ns to h). */
#define EBB_DURATION_CONFIG (EBB_DURATION_MS | EBB_DURATION_S | EBB_DURATION_M | EBB_DURATION_H)
#define EBB_DURATION_GO (EBB_DURATION_CONFIG | EBB_DURATION_NS | EBB_DURATION_US)

/* Parses s: a plain number (seconds, strtod's syntax), or an optional sign followed by one or
 * more NUMBER UNIT parts, each number starting with a digit or '.', each unit one of `units`
 * (the longest match wins: "ms" before "m"). Writes the total in seconds to *secs and returns
 * true; returns false (leaving *secs) for NULL, an empty string, a unit outside `units` or
 * anything else. Thread-safe, allocates nothing. */
bool ebb_duration_parse(const char *s, unsigned units, double *secs);

#endif
