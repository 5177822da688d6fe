/* Reading a model file ahead of its open, with progress in the log, on a terminal and in
 * systemd STATUS= lines. */
#ifndef EBB_DAEMON_WARM_H
#define EBB_DAEMON_WARM_H

#include <stddef.h>

/* Reads the file at path once, in 64 MiB steps with posix_fadvise(WILLNEED) ahead, so that the
 * model open that follows finds its weights in the page cache. Reports progress ("<what>: 40%
 * (36.0 of 90.1 MB, 410.3 MB/s)") in the log, as a live line on a terminal and as systemd
 * STATUS= lines. Errors are logged at debug level and otherwise ignored: the open reports them.
 * Any thread. */
void ebb_warm_file(const char *path, const char *what);

/* Makes "loading NAME" from a model path for progress lines (buf always terminated). */
void ebb_warm_what(const char *path, char *buf, size_t n);

#endif
