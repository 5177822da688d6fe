/* Reading a model file once, with progress, so that the model open that follows finds its
 * weights in the page cache. Shared by `ebb serve` and `ebb run`. */
#include "daemon/warm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "daemon/notify.h"

#define WARM_STEP ((uint64_t)64 << 20)
#define WARM_BUF ((size_t)1 << 20)

void ebb_warm_what(const char *path, char *buf, size_t n)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t l = strlen(base);
    if (n < 9)
        return;
    if (l > n - 9) /* keep the end of a very long name */
        base += l - (n - 9);
    memcpy(buf, "loading ", 8);
    memcpy(buf + 8, base, strlen(base) + 1);
}

/* True when every page of the file is in the page cache (mincore over a mapping of it). */
static bool in_page_cache(int fd, uint64_t size)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || size > (uint64_t)SIZE_MAX / 2)
        return false;
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return false;
    size_t n = (size_t)((size + (uint64_t)pg - 1) / (uint64_t)pg);
    unsigned char *vec = malloc(n);
    bool all = vec && mincore(map, (size_t)size, (void *)vec) == 0;
    for (size_t i = 0; all && i < n; i++)
        all = vec[i] & 1;
    free(vec);
    munmap(map, (size_t)size);
    return all;
}

void ebb_warm_file(const char *path, const char *what)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = NULL;
    if (fd < 0) {
        ebb_log_debug("load", "%s: %s", path, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0)
        goto out;
    buf = malloc(WARM_BUF);
    if (!buf)
        goto out;
    uint64_t total = (uint64_t)st.st_size, done = 0;
    if (in_page_cache(fd, total)) {
        /* Another model's load, or an earlier load of this one, read it: copying it again
         * would only spend CPU the load (and the models serving meanwhile) could use. */
        ebb_log_info("load", "%s: already in the page cache", what);
        goto out;
    }
    struct ebb_log_progress p;
    ebb_log_progress_begin(&p, what, total);
    ebb_notify_status("%s: 0%%", what);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    while (done < total) {
        uint64_t step = total - done < WARM_STEP ? total - done : WARM_STEP;
#ifdef POSIX_FADV_WILLNEED
        /* The next step is already on its way while this one is read. */
        if (done + step < total)
            posix_fadvise(fd, (off_t)(done + step), (off_t)WARM_STEP, POSIX_FADV_WILLNEED);
#endif
        uint64_t end = done + step;
        while (done < end) {
            size_t want = end - done < WARM_BUF ? (size_t)(end - done) : WARM_BUF;
            ssize_t got = pread(fd, buf, want, (off_t)done);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                ebb_log_debug("load", "%s: read stopped at %llu bytes", path,
                              (unsigned long long)done);
                goto end;
            }
            done += (uint64_t)got;
        }
        if (ebb_log_progress_update(&p, done)) {
            char line[256];
            ebb_log_progress_format(&p, line, sizeof(line));
            ebb_notify_status("%s", line);
        }
    }
end:
    ebb_log_progress_end(&p);
out:
    free(buf);
    close(fd);
}
