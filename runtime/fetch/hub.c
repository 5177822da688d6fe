/* What a pull spec names on the hub: hf://OWNER/REPO/PATH.gguf as it is, OWNER/REPO:QUANT by the
 * repository's file list (GET {endpoint}/api/models/OWNER/REPO, its "siblings"), and every part
 * of a split GGUF. Files come from {endpoint}/OWNER/REPO/resolve/main/PATH. */
#include "fetch.h"
#include "fetch-int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

#define MAX_PARTS 999

struct spec {
    char repo[256];  /* OWNER/REPO */
    char file[1024]; /* path in the repository, "" = pick by quant */
    char quant[64];  /* "" = none given */
};

static bool repo_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

static bool ends_gguf(const char *s)
{
    size_t n = strlen(s);
    return n > 5 && !strcasecmp(s + n - 5, ".gguf");
}

static ebb_err parse_spec(const char *in, struct spec *sp, struct ebb_diag *diag)
{
    memset(sp, 0, sizeof(*sp));
    const char *s = in;
    if (!strncmp(s, "hf://", 5))
        s += 5;
    else if (!strncmp(s, "https://huggingface.co/", 23))
        s += 23;
    else if (!strncmp(s, "huggingface.co/", 15))
        s += 15;
    else if (!strncmp(s, "hf.co/", 6))
        s += 6;
    const char *slash = strchr(s, '/');
    if (!slash || slash == s)
        goto bad;
    const char *r = slash + 1;
    size_t rl = strcspn(r, "/:");
    if (rl == 0)
        goto bad;
    for (const char *c = s; c < r + rl; c++)
        if (c != slash && !repo_char(*c))
            goto bad;
    if ((size_t)(r + rl - s) >= sizeof(sp->repo))
        goto bad;
    memcpy(sp->repo, s, (size_t)(r + rl - s));
    const char *rest = r + rl;
    if (*rest == '/') {
        rest++;
        /* resolve/main/ or blob/main/ as copied from the hub's web page */
        if (!strncmp(rest, "resolve/main/", 13) || !strncmp(rest, "blob/main/", 10))
            rest += rest[0] == 'r' ? 13 : 10;
        if (strlen(rest) >= sizeof(sp->file) || !ends_gguf(rest) || strstr(rest, "..") ||
            strstr(rest, "//") || rest[0] == '/')
            goto bad;
        for (const char *c = rest; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '\\' || *c == '?' || *c == '#')
                goto bad;
        strcpy(sp->file, rest);
    } else if (*rest == ':') {
        rest++;
        if (!*rest || strlen(rest) >= sizeof(sp->quant))
            goto bad;
        for (const char *c = rest; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-' && *c != '.')
                goto bad;
        strcpy(sp->quant, rest);
    } else if (*rest) {
        goto bad;
    }
    return EBB_OK;
bad:
    return ebb_diag_set(diag, EBB_EINVAL,
                        "'%s' is not a model to pull: give hf://OWNER/REPO/FILE.gguf or "
                        "OWNER/REPO:QUANT (e.g. unsloth/gemma-3-270m-it-GGUF:Q4_K_M)",
                        in);
}

ebb_err ebb_pull_check_spec(const char *spec, struct ebb_diag *diag)
{
    struct spec sp;
    return parse_spec(spec, &sp, diag);
}

bool ebb_pull_split_name(const char *name, int *no, int *count, size_t *stem)
{
    /* NAME-00001-of-00003.gguf: 5 digits, "-of-", 5 digits */
    size_t n = strlen(name);
    if (n < 21 || strcasecmp(name + n - 5, ".gguf"))
        return false;
    const char *p = name + n - 5 - 15;
    if (p[0] != '-' || strncmp(p + 6, "-of-", 4))
        return false;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)p[1 + i]) || !isdigit((unsigned char)p[10 + i]))
            return false;
    int a = atoi(p + 1), b = atoi(p + 10);
    if (a < 1 || b < 1 || a > b)
        return false;
    *no = a;
    *count = b;
    *stem = (size_t)(p - name);
    return true;
}

/* Does the file name carry quant, bounded on the left by a separator or the start, on the right
 * by '-' or '.' (so Q4_K does not take Q4_K_M)? */
static bool has_quant(const char *path, const char *quant)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t ql = strlen(quant);
    for (const char *p = base; *p; p++) {
        if (strncasecmp(p, quant, ql))
            continue;
        char before = p == base ? '-' : p[-1], after = p[ql];
        if ((before == '-' || before == '.' || before == '_') && (after == '-' || after == '.'))
            return true;
    }
    return false;
}

/* Percent-encodes a repository path for a URL (each segment; '/' kept). */
static void url_path(const char *in, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)in; *c && n + 4 < cap; c++) {
        if (isalnum(*c) || strchr("-._~/", *c)) {
            out[n++] = (char)*c;
        } else {
            out[n++] = '%';
            out[n++] = hex[*c >> 4];
            out[n++] = hex[*c & 15];
        }
    }
    out[n] = '\0';
}

/* Picks the file of sp->repo whose name carries sp->quant (or the only model) from the hub's
 * list into sp->file. */
static ebb_err pick(struct spec *sp, const char *endpoint, const struct ebb_pull_opts *o,
                    struct ebb_diag *diag)
{
    char url[2048];
    snprintf(url, sizeof(url), "%s/api/models/%s", endpoint, sp->repo);
    struct ebb__http h;
    struct ebb__http_req req = {
        .method = "GET", .token = o->token, .timeout_s = o->timeout_s, .cancel = o->cancel};
    char *body = NULL;
    size_t len;
    json_t *root = NULL;
    ebb_err rc = ebb__http_open(&h, url, &req, diag);
    if (rc)
        return rc;
    if (h.status == 401 || h.status == 403 || h.status == 404) {
        rc = ebb_diag_set(diag, h.status == 404 ? EBB_ENOTFOUND : EBB_EIO,
                          "repository %s %s at %s (HTTP %d)%s", sp->repo,
                          h.status == 404 ? "not found" : "refused", endpoint, h.status,
                          h.status == 404 ? ""
                          : o->token      ? ": HF_TOKEN was refused"
                                          : ": a gated or private one? set HF_TOKEN");
        goto out;
    }
    if (h.status != 200) {
        rc = ebb_diag_set(diag, EBB_EIO, "%s: HTTP %d", url, h.status);
        goto out;
    }
    if ((rc = ebb__http_read_all(&h, 16u << 20, &body, &len, diag)))
        goto out;
    json_error_t je;
    root = json_loadb(body, len, 0, &je);
    json_t *sib = root ? json_object_get(root, "siblings") : NULL;
    if (!json_is_array(sib)) {
        rc = ebb_diag_set(diag, EBB_EFORMAT, "%s: no \"siblings\" list in the answer", url);
        goto out;
    }
    /* The candidates: .gguf files that are not a vision projector, a split set counted once
     * (by its first part). */
    char list[1024] = "";
    size_t ll = 0;
    int n_hit = 0, n_all = 0;
    size_t i;
    json_t *v;
    json_array_foreach(sib, i, v)
    {
        const char *f = json_string_value(json_object_get(v, "rfilename"));
        int no, count;
        size_t stem;
        if (!f || !ends_gguf(f) || strcasestr(f, "mmproj") || strlen(f) >= sizeof(sp->file) ||
            (ebb_pull_split_name(f, &no, &count, &stem) && no != 1))
            continue;
        n_all++;
        bool hit = sp->quant[0] ? has_quant(f, sp->quant) : true;
        if (hit) {
            if (!n_hit++)
                strcpy(sp->file, f);
        }
        if (ll + strlen(f) + 8 < sizeof(list))
            ll += (size_t)snprintf(list + ll, sizeof(list) - ll, "%s%s", ll ? ", " : "", f);
    }
    if (n_hit == 1)
        goto out;
    if (n_all == 0)
        rc = ebb_diag_set(diag, EBB_ENOTFOUND, "repository %s has no .gguf file", sp->repo);
    else if (n_hit == 0)
        rc = ebb_diag_set(diag, EBB_ENOTFOUND, "no %s file in %s; it has: %s", sp->quant, sp->repo,
                          list);
    else
        rc = ebb_diag_set(diag, EBB_EINVAL, "%s%s names %d files in %s; pick one with %s: %s",
                          sp->repo, sp->quant[0] ? ":" : "", n_hit, sp->repo,
                          sp->quant[0] ? "hf://OWNER/REPO/FILE.gguf" : "OWNER/REPO:QUANT", list);
out:
    json_decref(root);
    free(body);
    ebb__http_close(&h);
    return rc;
}

ebb_err ebb_pull(const char *spec, const char *dir, const struct ebb_pull_opts *opts, char *path,
                 size_t path_cap, struct ebb_diag *diag)
{
    struct ebb_pull_opts o = *opts;
    struct spec sp;
    ebb_err rc = parse_spec(spec, &sp, diag);
    if (rc)
        return rc;
    if (!o.endpoint)
        o.endpoint = getenv("HF_ENDPOINT");
    if (!o.endpoint || !*o.endpoint)
        o.endpoint = "https://huggingface.co";
    if (!o.token)
        o.token = getenv("HF_TOKEN");
    if (o.token && !*o.token)
        o.token = NULL;
    char ep[1024];
    snprintf(ep, sizeof(ep), "%s", o.endpoint);
    for (size_t n = strlen(ep); n && ep[n - 1] == '/';)
        ep[--n] = '\0';
    struct ebb__url u;
    if ((rc = ebb__url_parse(ep, &u, diag)))
        return rc;
    struct stat st;
    if (stat(dir, &st) && mkdir(dir, 0755))
        return ebb_diag_set(diag, EBB_EIO, "cannot create the models directory %s", dir);
    if (!sp.file[0]) {
        if (o.progress) {
            struct ebb_pull_progress p = {.phase = EBB_PULL_RESOLVING,
                                          .file = sp.repo,
                                          .part = 1,
                                          .n_parts = 1,
                                          .sha256 = ""};
            o.progress(&p, o.ud);
        }
        if ((rc = pick(&sp, ep, &o, diag)))
            return rc;
    }
    int no = 1, count = 1;
    size_t stem = 0;
    bool split = ebb_pull_split_name(sp.file, &no, &count, &stem);
    if (split && count > MAX_PARTS)
        return ebb_diag_set(diag, EBB_ERANGE, "%s: %d parts, more than %d", sp.file, count,
                            MAX_PARTS);
    for (int k = split ? 1 : 0; k <= (split ? count : 0); k++) {
        char file[1100], enc[3400], url[4600];
        if (split)
            snprintf(file, sizeof(file), "%.*s-%05d-of-%05d.gguf", (int)stem, sp.file, k, count);
        else
            snprintf(file, sizeof(file), "%s", sp.file);
        const char *base = strrchr(file, '/');
        base = base ? base + 1 : file;
        url_path(file, enc, sizeof(enc));
        snprintf(url, sizeof(url), "%s/%s/resolve/main/%s", ep, sp.repo, enc);
        if ((rc = ebb__pull_file(url, dir, base, split ? k : 1, count, &o, diag)))
            return rc;
        if (k <= 1 && path && snprintf(path, path_cap, "%s/%s", dir, base) >= (int)path_cap)
            return ebb_diag_set(diag, EBB_EINVAL, "path too long");
    }
    return EBB_OK;
}
