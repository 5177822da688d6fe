/* Logging for the daemon: one line per entry on stderr (journald and launchd capture it), with a
 * level filter and a text or JSON format that can both change at run time (SIGHUP reload).
 *
 * Every function here is thread-safe: a line is formatted on the caller's stack and written
 * with one write(2) under a mutex, so lines from the loop, engine and I/O threads never
 * interleave. Nothing allocates. */
#ifndef EBB_DAEMON_LOG_H
#define EBB_DAEMON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ebb_log_level {
    EBB_LOG_ERROR = 0,
    EBB_LOG_WARN = 1,
    EBB_LOG_INFO = 2,
    EBB_LOG_DEBUG = 3,
};

enum ebb_log_format {
    EBB_LOG_TEXT = 0, /* "2026-11-22T14:10:00.123Z info  [serve] message" */
    EBB_LOG_JSON = 1, /* {"ts":"...","level":"info","module":"serve","msg":"message"} */
};

#if defined(__GNUC__)
#define EBB__LOG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EBB__LOG_PRINTF(a, b)
#endif

/* Sets the level filter and the format; entries above level are dropped. Safe to call from any
 * thread at any time (a reload); lines already being written finish in the old format. */
void ebb_log_configure(enum ebb_log_level level, enum ebb_log_format format);

/* Sends the log to fd instead of stderr (tests). The caller keeps fd open while it is in use;
 * -1 restores stderr. Under journald (JOURNAL_STREAM names the log fd) text lines carry a
 * "<N>" priority prefix instead of a timestamp, since the journal stamps them itself. */
void ebb_log_set_fd(int fd);

enum ebb_log_level ebb_log_get_level(void);

/* True when an entry at level would be written; use it to skip expensive formatting. */
bool ebb_log_enabled(enum ebb_log_level level);

/* Parses "error", "warn" (or "warning"), "info", "debug"; returns false on anything else. */
bool ebb_log_level_parse(const char *s, enum ebb_log_level *out);
/* Parses "text" or "json"; returns false on anything else. */
bool ebb_log_format_parse(const char *s, enum ebb_log_format *out);
const char *ebb_log_level_name(enum ebb_log_level level);
const char *ebb_log_format_name(enum ebb_log_format format);

/* Writes one entry. module is a short tag ("serve", "http", "model"); the message is
 * printf-formatted and truncated to about 3.5 KiB; newlines in it are escaped so that one entry
 * stays one line. */
void ebb_log(enum ebb_log_level level, const char *module, const char *fmt, ...)
    EBB__LOG_PRINTF(3, 4);
void ebb_log_error(const char *module, const char *fmt, ...) EBB__LOG_PRINTF(2, 3);
void ebb_log_warn(const char *module, const char *fmt, ...) EBB__LOG_PRINTF(2, 3);
void ebb_log_info(const char *module, const char *fmt, ...) EBB__LOG_PRINTF(2, 3);
void ebb_log_debug(const char *module, const char *fmt, ...) EBB__LOG_PRINTF(2, 3);

/* One finished HTTP request. Pointers may be NULL (omitted); token counts < 0 are omitted. */
struct ebb_log_request {
    const char *method; /* "POST" */
    const char *path;   /* "/v1/chat/completions" (no query string, please: it may hold keys) */
    int status;         /* HTTP status sent */
    int64_t prompt_tokens;
    int64_t completion_tokens;
    double ms;          /* from the first byte received to the last byte queued */
    const char *remote; /* "127.0.0.1" */
    const char *id;     /* request/completion id, e.g. "chatcmpl-..." */
    const char *error;  /* short reason for a status >= 400 */
};

/* Writes the one line per request, under module "http" at level info (warn for 5xx):
 *   text: POST /v1/chat/completions 200 prompt=12 completion=40 ms=532.1 remote=... id=...
 *   json: {"ts":...,"level":"info","module":"http","msg":"request","method":"POST",
 *          "path":"...","status":200,"prompt_tokens":12,"completion_tokens":40,"ms":532.1,...} */
void ebb_log_request(const struct ebb_log_request *r);

/* Progress of a long job (model loading): logs at most every 10 percent or every 2 seconds,
 * and on a terminal (text format, stderr a tty) redraws one line instead. Single-threaded: one
 * progress object belongs to one thread. */
struct ebb_log_progress {
    char what[64];    /* "loading SmolLM2-135M-Instruct.Q4_1.gguf" */
    uint64_t total;   /* bytes; 0 if unknown */
    uint64_t done;    /* bytes so far */
    double t0;        /* monotonic seconds at begin */
    double last_emit; /* monotonic seconds of the last line */
    int last_pct;     /* percent of the last line, -1 before the first */
    bool tty;
};

void ebb_log_progress_begin(struct ebb_log_progress *p, const char *what, uint64_t total);
/* Records done bytes; returns true when it wrote a line (callers may then send the same text
 * as a systemd STATUS= line, see ebb_log_progress_format). */
bool ebb_log_progress_update(struct ebb_log_progress *p, uint64_t done);
/* Writes the final line ("... done: 285.3 MB in 0.9 s, 317.0 MB/s"). */
void ebb_log_progress_end(struct ebb_log_progress *p);
/* Formats "loading x: 42% (120.0 of 285.3 MB, 310.2 MB/s)" into buf (always terminated). */
void ebb_log_progress_format(const struct ebb_log_progress *p, char *buf, size_t n);

#endif
