/* Pulling models from a Hugging Face hub (or a server that answers like one) into a models
 * directory: the file named, or the one a quant name picks from the repository's list, every
 * part of a split GGUF, resumed from a .part file, checked against the sha256 the hub reports,
 * renamed into place only when whole. Used by `ebb pull` and ollama's /api/pull. Blocking; call
 * it from a thread that may wait minutes; the process should ignore SIGPIPE (a server that
 * closes while a request is written). */
#ifndef EBB_FETCH_FETCH_H
#define EBB_FETCH_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum ebb_pull_phase {
    EBB_PULL_RESOLVING,   /* asking the hub which file(s) a name means */
    EBB_PULL_DOWNLOADING, /* bytes arriving */
    EBB_PULL_VERIFYING,   /* hashing what is on disk */
    EBB_PULL_RETRYING,    /* an attempt failed (note says why); the next resumes */
    EBB_PULL_DONE,        /* one file complete and in place */
};

/* What a progress callback sees; valid during the call only. */
struct ebb_pull_progress {
    enum ebb_pull_phase phase;
    const char *file;     /* the file's name in the models directory */
    int part, n_parts;    /* 1-based; 1 of 1 for a single file */
    uint64_t done, total; /* bytes of this file on disk; total 0 = not known yet */
    uint64_t resumed;     /* bytes that were already there when this attempt began */
    const char *sha256;   /* the digest the hub reported, "" if none */
    bool present;         /* DONE: the file was there already, nothing fetched */
    const char *note;     /* RETRYING: the failure */
};

typedef void (*ebb_pull_cb)(const struct ebb_pull_progress *p, void *ud);

struct ebb_pull_opts {
    const char *endpoint; /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;    /* NULL: $HF_TOKEN; sent as a Bearer token to the endpoint's host */
    int timeout_s;        /* connect and read timeout; 0 = 30 s */
    int retries;          /* further attempts after a failure mid-body (resuming); < 0 = 3 */
    ebb_pull_cb progress; /* may be NULL; called on the pulling thread, at most ~10 times/s */
    void *ud;
    /* Non-NULL and set (by another thread): the pull stops within a quarter second (a wait
     * for the server's bytes is cut in quarter seconds) with EBB_ECANCELED, keeping the .part. */
    volatile int *cancel;
};

/* Pulls spec into dir. spec is hf://OWNER/REPO/PATH/FILE.gguf (the hf:// may be left off when a
 * path follows the repository), or OWNER/REPO:QUANT (the .gguf of the repository whose name
 * carries QUANT, e.g. Q4_K_M), or OWNER/REPO when it holds a single model (an hf.co/ or
 * huggingface.co/ in front, as ollama names hub models, is accepted). A split GGUF's first
 * part brings all of them. Files already in dir are kept as they are. On success path gets the
 * (first) file's path. Errors name the problem in diag: EBB_ENOTFOUND (no such repository, file
 * or quant), EBB_EINVAL (bad spec, several files match, HTTP 401/403, a certificate not
 * trusted), EBB_EIO (network, other HTTP statuses, disk, checksum mismatch: the .part is removed
 * then), EBB_ERANGE (not enough disk space), EBB_EBUSY (another pull writes the same file). */
ebb_err ebb_pull(const char *spec, const char *dir, const struct ebb_pull_opts *opts, char *path,
                 size_t path_cap, struct ebb_diag *diag);

/* Checks that spec has a form ebb_pull accepts (nothing is fetched); EBB_EINVAL with the
 * message ebb_pull would give otherwise. */
ebb_err ebb_pull_check_spec(const char *spec, struct ebb_diag *diag);

/* Recognises NAME-00001-of-00003.gguf: *no and *count set (1-based), and the length of NAME
 * in *stem. False for any other name. */
bool ebb_pull_split_name(const char *name, int *no, int *count, size_t *stem);

#endif
