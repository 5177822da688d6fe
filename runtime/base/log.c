/* Line-oriented logging; see log.h for the contract. */
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096
#define LOG_MSG_MAX 3584
#define MSG_BUDGET 3800 /* escaped message bytes; header and tail fit in the rest */

static atomic_int g_level = EBB_LOG_INFO;
static atomic_int g_format = EBB_LOG_TEXT;
static atomic_int g_fd = -1;      /* -1: stderr */
static atomic_int g_journal = -1; /* -1: not yet probed, 0/1 afterwards */
static pthread_mutex_t g_write_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static int log_fd(void)
{
    int fd = atomic_load(&g_fd);
    return fd < 0 ? STDERR_FILENO : fd;
}

/* journald sets JOURNAL_STREAM=<dev>:<ino> for the stream it reads; it only applies while our
 * log fd is that very stream (not after a redirect in a wrapper script). */
static bool journal_probe(int fd)
{
    const char *js = getenv("JOURNAL_STREAM");
    if (!js)
        return false;
    unsigned long long dev = 0, ino = 0;
    if (sscanf(js, "%llu:%llu", &dev, &ino) != 2)
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static bool under_journal(void)
{
    int j = atomic_load(&g_journal);
    if (j < 0) {
        j = journal_probe(log_fd()) ? 1 : 0;
        atomic_store(&g_journal, j);
    }
    return j == 1;
}

void ebb_log_configure(enum ebb_log_level level, enum ebb_log_format format)
{
    if ((int)level < EBB_LOG_ERROR)
        level = EBB_LOG_ERROR;
    if (level > EBB_LOG_DEBUG)
        level = EBB_LOG_DEBUG;
    atomic_store(&g_level, (int)level);
    atomic_store(&g_format, format == EBB_LOG_JSON ? EBB_LOG_JSON : EBB_LOG_TEXT);
}

void ebb_log_set_fd(int fd)
{
    atomic_store(&g_fd, fd < 0 ? -1 : fd);
    atomic_store(&g_journal, -1);
}

enum ebb_log_level ebb_log_get_level(void)
{
    return (enum ebb_log_level)atomic_load(&g_level);
}

bool ebb_log_enabled(enum ebb_log_level level)
{
    return (int)level <= atomic_load(&g_level);
}

bool ebb_log_level_parse(const char *s, enum ebb_log_level *out)
{
    if (!s)
        return false;
    for (int i = 0; i < 4; i++) {
        if (!strcmp(s, level_names[i])) {
            *out = (enum ebb_log_level)i;
            return true;
        }
    }
    if (!strcmp(s, "warning")) {
        *out = EBB_LOG_WARN;
        return true;
    }
    return false;
}

bool ebb_log_format_parse(const char *s, enum ebb_log_format *out)
{
    if (s && !strcmp(s, "text")) {
        *out = EBB_LOG_TEXT;
        return true;
    }
    if (s && !strcmp(s, "json")) {
        *out = EBB_LOG_JSON;
        return true;
    }
    return false;
}

const char *ebb_log_level_name(enum ebb_log_level level)
{
    return (int)level >= 0 && level <= EBB_LOG_DEBUG ? level_names[level] : "?";
}

const char *ebb_log_format_name(enum ebb_log_format format)
{
    return format == EBB_LOG_JSON ? "json" : "text";
}

/* A capped line buffer: appends past the cap are dropped and remembered, so a long message is
 * cut rather than overflowing; one byte is always kept for the final newline. */
struct lbuf {
    char b[LOG_LINE_MAX];
    size_t n;
    bool cut;
};

static void lb_putc(struct lbuf *l, char c)
{
    if (l->n + 1 < sizeof(l->b))
        l->b[l->n++] = c;
    else
        l->cut = true;
}

static void lb_puts(struct lbuf *l, const char *s)
{
    while (*s)
        lb_putc(l, *s++);
}

static void lb_printf(struct lbuf *l, const char *fmt, ...) EBB__LOG_PRINTF(2, 3);
static void lb_printf(struct lbuf *l, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    lb_puts(l, tmp);
}

/* Length of a well-formed UTF-8 sequence at s, or 0 if it is malformed. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n;
    if (s[0] < 0x80)
        return 1;
    else if ((s[0] & 0xE0) == 0xC0 && s[0] >= 0xC2)
        n = 2;
    else if ((s[0] & 0xF0) == 0xE0)
        n = 3;
    else if ((s[0] & 0xF8) == 0xF0 && s[0] <= 0xF4)
        n = 4;
    else
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Appends s as the inside of a JSON string: quotes, backslashes and control characters escaped,
 * malformed UTF-8 (client paths may hold anything) replaced by U+FFFD. At most max bytes are
 * appended; a longer string is cut at a character boundary and ends in "...", so the JSON stays
 * valid and the fields after it still fit in the line. */
static void lb_json_str(struct lbuf *l, const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t start = l->n;
    while (*p) {
        if (l->n - start + 6 + 4 > max) {
            lb_puts(l, "...");
            return;
        }
        if (*p == '"' || *p == '\\') {
            lb_putc(l, '\\');
            lb_putc(l, (char)*p++);
        } else if (*p == '\n') {
            lb_puts(l, "\\n");
            p++;
        } else if (*p == '\t') {
            lb_puts(l, "\\t");
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            lb_printf(l, "\\u%04x", *p++);
        } else {
            size_t n = utf8_len(p);
            if (n == 0) {
                lb_puts(l, "\\ufffd");
                p++;
            } else {
                for (size_t i = 0; i < n; i++)
                    lb_putc(l, (char)p[i]);
                p += n;
            }
        }
    }
}

/* Appends s for a text line: newlines and other control characters escaped so an entry stays
 * one line; at most max bytes, like lb_json_str. */
static void lb_text_str(struct lbuf *l, const char *s, size_t max)
{
    size_t start = l->n;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (l->n - start + 4 + 3 > max) {
            lb_puts(l, "...");
            return;
        }
        if (*p == '\n')
            lb_puts(l, "\\n");
        else if (*p == '\r')
            lb_puts(l, "\\r");
        else if (*p < 0x20 && *p != '\t')
            lb_printf(l, "\\x%02x", *p);
        else
            lb_putc(l, (char)*p);
    }
}

static void lb_timestamp(struct lbuf *l)
{
    struct timespec ts;
    struct tm tm;
    char tmp[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(tmp, sizeof(tmp), "%Y-%m-%dT%H:%M:%S", &tm);
    lb_printf(l, "%s.%03ldZ", tmp, ts.tv_nsec / 1000000L);
}

/* Starts a line: the timestamp/level/module header for text, the opening fields for JSON. */
static void lb_begin(struct lbuf *l, bool json, enum ebb_log_level level, const char *module)
{
    l->n = 0;
    l->cut = false;
    if (json) {
        lb_puts(l, "{\"ts\":\"");
        lb_timestamp(l);
        lb_printf(l, "\",\"level\":\"%s\",\"module\":\"", ebb_log_level_name(level));
        lb_json_str(l, module ? module : "ebb", 32);
        lb_puts(l, "\",\"msg\":\"");
        return;
    }
    static const int syslog_prio[] = {3, 4, 6, 7};
    if (under_journal()) {
        lb_printf(l, "<%d>", syslog_prio[level]);
    } else {
        lb_timestamp(l);
        lb_printf(l, " %-5s ", ebb_log_level_name(level));
    }
    lb_putc(l, '[');
    lb_text_str(l, module ? module : "ebb", 32);
    lb_puts(l, "] ");
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere left to report a failing log; drop the line */
        p += w;
        n -= (size_t)w;
    }
}

/* Ends the line (closing the JSON object) and writes it in one go. */
static void lb_finish(struct lbuf *l, bool json)
{
    /* The per-string budgets keep every line well inside the buffer; if that ever failed the
     * line would still end in a newline, only cut. */
    const char *tail = json ? "}\n" : "\n";
    if (l->n + strlen(tail) > sizeof(l->b))
        l->n = sizeof(l->b) - strlen(tail);
    memcpy(l->b + l->n, tail, strlen(tail));
    l->n += strlen(tail);
    pthread_mutex_lock(&g_write_lock);
    write_all(log_fd(), l->b, l->n);
    pthread_mutex_unlock(&g_write_lock);
}

static void vlog(enum ebb_log_level level, const char *module, const char *fmt, va_list ap)
{
    if (!ebb_log_enabled(level))
        return;
    char msg[LOG_MSG_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    bool json = atomic_load(&g_format) == EBB_LOG_JSON;
    struct lbuf l;
    lb_begin(&l, json, level, module);
    if (json) {
        lb_json_str(&l, msg, MSG_BUDGET);
        lb_putc(&l, '"');
    } else {
        lb_text_str(&l, msg, MSG_BUDGET);
    }
    lb_finish(&l, json);
}

void ebb_log(enum ebb_log_level level, const char *module, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, module, fmt, ap);
    va_end(ap);
}

#define EBB__LOG_AT(fn, lvl)                                                                       \
    void fn(const char *module, const char *fmt, ...)                                              \
    {                                                                                              \
        va_list ap;                                                                                \
        va_start(ap, fmt);                                                                         \
        vlog(lvl, module, fmt, ap);                                                                \
        va_end(ap);                                                                                \
    }
EBB__LOG_AT(ebb_log_error, EBB_LOG_ERROR)
EBB__LOG_AT(ebb_log_warn, EBB_LOG_WARN)
EBB__LOG_AT(ebb_log_info, EBB_LOG_INFO)
EBB__LOG_AT(ebb_log_debug, EBB_LOG_DEBUG)

void ebb_log_request(const struct ebb_log_request *r)
{
    enum ebb_log_level level = r->status >= 500 ? EBB_LOG_WARN : EBB_LOG_INFO;
    if (!ebb_log_enabled(level))
        return;
    bool json = atomic_load(&g_format) == EBB_LOG_JSON;
    struct lbuf l;
    lb_begin(&l, json, level, "http");
    if (json) {
        lb_puts(&l, "request\",\"method\":\"");
        lb_json_str(&l, r->method ? r->method : "-", 32);
        lb_puts(&l, "\",\"path\":\"");
        lb_json_str(&l, r->path ? r->path : "-", 1024);
        lb_printf(&l, "\",\"status\":%d", r->status);
        if (r->prompt_tokens >= 0)
            lb_printf(&l, ",\"prompt_tokens\":%lld", (long long)r->prompt_tokens);
        if (r->completion_tokens >= 0)
            lb_printf(&l, ",\"completion_tokens\":%lld", (long long)r->completion_tokens);
        lb_printf(&l, ",\"ms\":%.1f", r->ms);
        const char *names[] = {"remote", "id", "error"};
        const char *vals[] = {r->remote, r->id, r->error};
        const size_t budgets[] = {128, 128, 1024};
        for (int i = 0; i < 3; i++) {
            if (!vals[i])
                continue;
            lb_printf(&l, ",\"%s\":\"", names[i]);
            lb_json_str(&l, vals[i], budgets[i]);
            lb_putc(&l, '"');
        }
    } else {
        lb_text_str(&l, r->method ? r->method : "-", 32);
        lb_putc(&l, ' ');
        lb_text_str(&l, r->path ? r->path : "-", 1024);
        lb_printf(&l, " %d", r->status);
        if (r->prompt_tokens >= 0)
            lb_printf(&l, " prompt=%lld", (long long)r->prompt_tokens);
        if (r->completion_tokens >= 0)
            lb_printf(&l, " completion=%lld", (long long)r->completion_tokens);
        lb_printf(&l, " ms=%.1f", r->ms);
        if (r->remote) {
            lb_puts(&l, " remote=");
            lb_text_str(&l, r->remote, 128);
        }
        if (r->id) {
            lb_puts(&l, " id=");
            lb_text_str(&l, r->id, 128);
        }
        if (r->error) {
            lb_puts(&l, " error=\"");
            lb_text_str(&l, r->error, 1024);
            lb_putc(&l, '"');
        }
    }
    lb_finish(&l, json);
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ebb_log_progress_begin(struct ebb_log_progress *p, const char *what, uint64_t total)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->what, sizeof(p->what), "%s", what ? what : "working");
    p->total = total;
    p->t0 = mono_now();
    p->last_emit = p->t0;
    p->last_pct = -1;
    p->tty = atomic_load(&g_format) == EBB_LOG_TEXT && isatty(log_fd()) && !under_journal() &&
             ebb_log_enabled(EBB_LOG_INFO);
}

static double mb_per_s(uint64_t bytes, double secs)
{
    return secs > 1e-6 ? (double)bytes / 1e6 / secs : 0.0;
}

void ebb_log_progress_format(const struct ebb_log_progress *p, char *buf, size_t n)
{
    double secs = mono_now() - p->t0;
    if (p->total > 0) {
        int pct = (int)(p->done >= p->total ? 100 : p->done * 100 / p->total);
        snprintf(buf, n, "%s: %d%% (%.1f of %.1f MB, %.1f MB/s)", p->what, pct,
                 (double)p->done / 1e6, (double)p->total / 1e6, mb_per_s(p->done, secs));
    } else {
        snprintf(buf, n, "%s: %.1f MB (%.1f MB/s)", p->what, (double)p->done / 1e6,
                 mb_per_s(p->done, secs));
    }
}

bool ebb_log_progress_update(struct ebb_log_progress *p, uint64_t done)
{
    p->done = done;
    double now = mono_now();
    int pct = p->total ? (int)(done >= p->total ? 100 : done * 100 / p->total) : -1;
    bool emit;
    if (p->tty)
        emit = pct != p->last_pct && now - p->last_emit >= 0.1;
    else
        emit = (pct >= 0 && pct >= p->last_pct + 10) || now - p->last_emit >= 2.0;
    if (!emit)
        return false;
    char line[256];
    ebb_log_progress_format(p, line, sizeof(line));
    if (p->tty) {
        char out[300];
        int k = snprintf(out, sizeof(out), "\r%s\033[K", line);
        pthread_mutex_lock(&g_write_lock);
        write_all(log_fd(), out, (size_t)k < sizeof(out) ? (size_t)k : sizeof(out) - 1);
        pthread_mutex_unlock(&g_write_lock);
    } else {
        ebb_log_info("progress", "%s", line);
    }
    p->last_emit = now;
    /* Round down to a multiple of ten so lines land on 10%, 20%, ... when updates are coarse. */
    p->last_pct = pct >= 0 && !p->tty ? pct - pct % 10 : pct;
    return true;
}

void ebb_log_progress_end(struct ebb_log_progress *p)
{
    double secs = mono_now() - p->t0;
    if (p->tty) {
        pthread_mutex_lock(&g_write_lock);
        write_all(log_fd(), "\r\033[K", 4);
        pthread_mutex_unlock(&g_write_lock);
    }
    ebb_log_info("progress", "%s done: %.1f MB in %.2f s, %.1f MB/s", p->what,
                 (double)p->done / 1e6, secs, mb_per_s(p->done, secs));
}
