/* `ebb ls` and `ebb rm`: what models_dir holds (a split model as one row, downloads not yet
 * finished as "partial"), and removing a model with every part and its .part files. */
#include "cmds.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon/ask.h"
#include "daemon/config.h"
#include "daemon/serve-int.h"
#include "fetch/fetch.h"
#include "gguf/gguf.h"

/* general.file_type's values as GGUF writers set them, by name. */
static const char *ftype_name(uint32_t t)
{
    static const char *const names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",
        [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",   [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL", [26] = "IQ3_S",  [27] = "IQ3_M",
        [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS", [31] = "IQ1_M",  [32] = "BF16",
        [36] = "TQ1_0",   [37] = "TQ2_0",   [38] = "MXFP4"};
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : NULL;
}

/* Family and quantization from a GGUF's header; "?" where the file does not say (or does not
 * parse: diag then says why). */
static void describe(const char *path, char *family, size_t nf, char *quant, size_t nq,
                     struct ebb_diag *d)
{
    struct ebb_gguf *g = NULL;
    snprintf(family, nf, "?");
    snprintf(quant, nq, "?");
    if (ebb_gguf_open(path, &g, d))
        return;
    struct ebb_str s;
    if (!ebb_gguf_get_str(g, "general.architecture", &s))
        snprintf(family, nf, "%.*s", (int)(s.n < 64 ? s.n : 64), s.p);
    uint32_t ft;
    const char *q = !ebb_gguf_get_u32(g, "general.file_type", &ft) ? ftype_name(ft) : NULL;
    if (!q) { /* the type most of the 2-D weights have */
        uint64_t count[64] = {0}, best = 0;
        for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++) {
            const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
            if (t->n_dims >= 2 && t->type < 64 && ++count[t->type] > best) {
                best = count[t->type];
                q = ebb_ggml_type_name(t->type);
            }
        }
    }
    if (q)
        snprintf(quant, nq, "%s", q);
    ebb_gguf_close(g);
}

struct entry {
    char name[256];
    uint64_t size;
    int parts;
    bool partial;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

/* The models of dir: .gguf files (a split model once, by its first part, with its parts' sizes
 * summed) and .gguf.part files. *out is malloc'd. */
static int scan(const char *dir, struct entry **out, size_t *n_out)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return -1;
    struct entry *e = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(dp));) {
        const char *nm = de->d_name;
        size_t len = strlen(nm);
        bool part = len > 10 && !strcasecmp(nm + len - 10, ".gguf.part");
        if (!part && (len <= 5 || strcasecmp(nm + len - 5, ".gguf")))
            continue;
        char path[4400];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, nm);
        if (stat(path, &st) || !S_ISREG(st.st_mode) || len >= sizeof(e->name))
            continue;
        int no = 0, count = 0;
        size_t stem = 0;
        char key[256];
        snprintf(key, sizeof(key), "%s", nm);
        if (!part && ebb_pull_split_name(nm, &no, &count, &stem))
            snprintf(key, sizeof(key), "%.*s-00001-of-%05d.gguf", (int)stem, nm, count);
        size_t i = 0;
        while (i < n && strcmp(e[i].name, key))
            i++;
        if (i == n) {
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                struct entry *ne = realloc(e, cap * sizeof(*e));
                if (!ne) {
                    free(e);
                    closedir(dp);
                    return -1;
                }
                e = ne;
            }
            memset(&e[n], 0, sizeof(e[n]));
            snprintf(e[n].name, sizeof(e[n].name), "%s", key);
            e[n].partial = part;
            n++;
        }
        e[i].size += (uint64_t)st.st_size;
        e[i].parts++;
    }
    closedir(dp);
    qsort(e, n, sizeof(*e), by_name);
    *out = e;
    *n_out = n;
    return 0;
}

/* ebb rm's daemon to tell: --host, --port, --api-key (else the configuration's). */
struct daemon_opts {
    const char *host, *key;
    unsigned port;
};

static int parse_dir_opts(const char *cmd, int argc, char **argv, const char **dir,
                          const char **config, bool *json, struct daemon_opts *dm,
                          void (*usage)(FILE *))
{
    enum { O_DIR = 256, O_CONFIG, O_JSON, O_HOST, O_PORT, O_KEY };
    static const struct option longs[] = {
        {"dir", required_argument, NULL, O_DIR},   {"config", required_argument, NULL, O_CONFIG},
        {"json", no_argument, NULL, O_JSON},       {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT}, {"api-key", required_argument, NULL, O_KEY},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    int c, at = 0;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longs, &at)) != -1) {
        if ((c == O_JSON && !json) || ((c == O_HOST || c == O_PORT || c == O_KEY) && !dm)) {
            fprintf(stderr, "ebb %s: no --%s here\n", cmd, longs[at].name);
            return 2;
        }
        switch (c) {
        case O_DIR:
            *dir = optarg;
            break;
        case O_CONFIG:
            *config = optarg;
            break;
        case O_JSON:
            *json = true;
            break;
        case O_HOST:
            dm->host = optarg;
            break;
        case O_PORT:
            dm->port = (unsigned)strtoul(optarg, &end, 10);
            if (*end || !*optarg || dm->port == 0 || dm->port > 65535) {
                fprintf(stderr, "ebb %s: --port %s: not a port (1-65535)\n", cmd, optarg);
                return 2;
            }
            break;
        case O_KEY:
            dm->key = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

static void ls_usage(FILE *f)
{
    fprintf(f, "usage: ebb ls [--dir DIR] [--config FILE] [--json]\n\n"
               "Lists the models in models_dir: name (what ebb serve's catalogue and -m call it),\n"
               "size on disk, family, quantization, and the parts of a split model. Downloads\n"
               "not finished show as partial.\n"
               "exit status: 0 success, 1 the directory cannot be read, 2 usage error\n");
}

int ebb_cmd_ls(int argc, char **argv)
{
    const char *dir = NULL, *config = NULL;
    bool json = false;
    int r = parse_dir_opts("ls", argc, argv, &dir, &config, &json, NULL, ls_usage);
    if (r >= 0)
        return r;
    if (optind < argc) {
        fprintf(stderr, "ebb ls: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    char mdir[4096];
    if (ebb__models_dir("ls", dir, config, mdir, sizeof(mdir)))
        return 1;
    struct entry *e = NULL;
    size_t n = 0;
    if (scan(mdir, &e, &n)) {
        if (errno == ENOENT && !json) {
            fprintf(stderr, "ebb ls: no models yet (%s does not exist)\n", mdir);
            return 0;
        }
        if (errno != ENOENT) {
            fprintf(stderr, "ebb ls: cannot read %s: %s\n", mdir, strerror(errno));
            return 1;
        }
    }
    json_t *arr = json_array();
    if (!json)
        printf("%-48s %10s %-12s %-8s %s\n", "NAME", "SIZE", "FAMILY", "QUANT", "PARTS");
    for (size_t i = 0; i < n; i++) {
        char path[4400], family[80] = "-", quant[32] = "-", name[256];
        struct ebb_diag d = {{0}};
        snprintf(path, sizeof(path), "%s/%s", mdir, e[i].name);
        if (!e[i].partial)
            describe(path, family, sizeof(family), quant, sizeof(quant), &d);
        /* The catalogue's name: the file name without .gguf (a split model: its first part's). */
        snprintf(name, sizeof(name), "%s", e[i].name);
        if (!e[i].partial)
            name[strlen(name) - 5] = '\0';
        if (json) {
            json_array_append_new(arr, json_pack("{sssIsssssisbss}", "name", name, "size",
                                                 (json_int_t)e[i].size, "family", family, "quant",
                                                 quant, "parts", e[i].parts, "partial",
                                                 e[i].partial, "file", e[i].name));
        } else {
            char parts[32] = "partial";
            if (!e[i].partial)
                snprintf(parts, sizeof(parts), "%d", e[i].parts);
            printf("%-48s %8.1fM %-12s %-8s %s\n", name, (double)e[i].size / 1048576.0, family,
                   quant, parts);
            if (d.msg[0])
                fprintf(stderr, "ebb ls: %s: %s\n", e[i].name, d.msg);
        }
    }
    if (json) {
        char *s = json_dumps(arr, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
    }
    json_decref(arr);
    free(e);
    return 0;
}

/* ---- ebb rm -----------------------------------------------------------------------------------
 */

static void rm_usage(FILE *f)
{
    fprintf(f, "usage: ebb rm [--dir DIR] [--config FILE] [--host ADDR] [--port PORT]\n"
               "              [--api-key KEY] NAME...\n\n"
               "Removes models from models_dir: NAME as ebb ls shows it (.gguf may be added),\n"
               "every part of a split model, and an unfinished download of it (.part). An ebb\n"
               "serve answering on the configured address (or --host/--port, with the\n"
               "configured API key or --api-key) is told (POST /models/unload): a several-model\n"
               "daemon drops the model from its listings at once and unloads it once its\n"
               "requests in flight are done; no daemon answering is no error.\n"
               "exit status: 0 success, 1 a model was not there or could not be removed,\n"
               "2 usage error\n");
}

static int unlink_one(const char *dir, const char *file, int *removed)
{
    char path[4400];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        fprintf(stderr, "ebb rm: %s/%s: path too long\n", dir, file);
        return 1;
    }
    if (unlink(path) == 0) {
        printf("removed %s\n", path);
        (*removed)++;
        return 0;
    }
    if (errno == ENOENT)
        return 0;
    fprintf(stderr, "ebb rm: %s: %s\n", path, strerror(errno));
    return 1;
}

/* The name a daemon of cfg serves dir/file by: the [model.NAME] section's whose file it is,
 * else the file name without .gguf. Called while the file is still there. */
static void served_id(const struct ebb_config *cfg, const char *dir, const char *file, char *id,
                      size_t n)
{
    char path[PATH_MAX], p[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    ebb__serve_model_id(path, id, n);
    for (size_t i = 0; cfg && i < cfg->n_models; i++) {
        const struct ebb_config_model *m = &cfg->models[i];
        ebb__serve_resolve(cfg, m->path ? m->path : m->name, p, sizeof(p));
        if (!strcmp(p, path))
            snprintf(id, n, "%s", m->name);
    }
}

/* Tells the daemon at dm that id's file is gone; says what it answered. Nothing answering is
 * not an error (no daemon runs), nor is a refusal (the file is gone all the same). */
static void tell_daemon(const struct daemon_opts *dm, const char *id)
{
    json_t *req = json_pack("{ss}", "model", id);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    int status = 0;
    char *ans =
        body ? ebb__ask(dm->host, dm->port, "POST", "/models/unload", dm->key, body, 5, &status)
             : NULL;
    free(body);
    if (!ans)
        return;
    json_t *o = json_loads(ans, 0, NULL);
    json_t *err = json_object_get(json_object_get(o, "error"), "message");
    const char *msg = json_is_string(err) ? json_string_value(err) : "";
    if (status == 200 || status == 404)
        printf("ebb serve on %s port %u: %s unloaded, no longer served\n", dm->host, dm->port, id);
    else if (status == 202)
        printf("ebb serve on %s port %u: %s no longer served; unloaded once its %lld request(s) "
               "in flight are done\n",
               dm->host, dm->port, id,
               (long long)json_integer_value(json_object_get(o, "in_flight")));
    else
        fprintf(stderr, "ebb rm: ebb serve on %s port %u answered %d for %s%s%s\n", dm->host,
                dm->port, status, id, *msg ? ": " : "", msg);
    json_decref(o);
    free(ans);
}

/* Removes arg from dir; a daemon to tell (dm, cfg for its section names) or NULL. */
static int rm_one(const char *dir, const char *arg, const struct daemon_opts *dm,
                  const struct ebb_config *cfg)
{
    if (!*arg || strchr(arg, '/') || !strcmp(arg, ".") || !strcmp(arg, "..")) {
        fprintf(stderr, "ebb rm: '%s' is not a model name (give it as ebb ls shows it)\n", arg);
        return 1;
    }
    char file[300], id[256];
    size_t len = strlen(arg);
    if (len > 5 && !strcasecmp(arg + len - 5, ".gguf"))
        snprintf(file, sizeof(file), "%s", arg);
    else
        snprintf(file, sizeof(file), "%s.gguf", arg);
    int removed = 0, bad = 0, no, count;
    size_t stem;
    if (ebb_pull_split_name(file, &no, &count, &stem)) {
        char first[320];
        snprintf(first, sizeof(first), "%.*s-%05d-of-%05d.gguf", (int)stem, file, 1, count);
        served_id(cfg, dir, first, id, sizeof(id));
        for (int k = 1; k <= count; k++) {
            char p[320];
            snprintf(p, sizeof(p), "%.*s-%05d-of-%05d.gguf", (int)stem, file, k, count);
            bad |= unlink_one(dir, p, &removed);
            snprintf(p, sizeof(p), "%.*s-%05d-of-%05d.gguf.part", (int)stem, file, k, count);
            bad |= unlink_one(dir, p, &removed);
        }
    } else {
        char p[320];
        served_id(cfg, dir, file, id, sizeof(id));
        bad |= unlink_one(dir, file, &removed);
        snprintf(p, sizeof(p), "%s.part", file);
        bad |= unlink_one(dir, p, &removed);
    }
    if (!removed && !bad) {
        fprintf(stderr, "ebb rm: no model '%s' in %s (ebb ls lists them)\n", arg, dir);
        return 1;
    }
    if (removed && dm)
        tell_daemon(dm, id);
    return bad;
}

/* True if a and b name one directory. */
static bool same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

int ebb_cmd_rm(int argc, char **argv)
{
    const char *dir = NULL, *config = NULL;
    struct daemon_opts dm = {0};
    int r = parse_dir_opts("rm", argc, argv, &dir, &config, NULL, &dm, rm_usage);
    if (r >= 0)
        return r;
    if (optind >= argc) {
        fprintf(stderr, "ebb rm: which model?\n");
        rm_usage(stderr);
        return 2;
    }
    struct ebb_config cfg;
    struct ebb_diag d = {{0}};
    bool have_cfg =
        ebb_config_init(&cfg) == EBB_OK && ebb_config_build(&cfg, config, NULL, 0, &d) == EBB_OK;
    if (!have_cfg && !dir) {
        fprintf(stderr, "ebb rm: %s\n", d.msg[0] ? d.msg : "out of memory");
        ebb_config_fini(&cfg);
        return 1;
    }
    const char *mdir = dir ? dir : cfg.models_dir;
    /* The daemon of the configuration serves its models_dir: told only about models of that. */
    bool tell = have_cfg && (!dir || same_dir(dir, cfg.models_dir));
    if (tell)
        ebb__ask_address(&cfg, &dm.host, &dm.port, &dm.key);
    /* A daemon that closes while the request is written must give an error, not a SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    int ret = 0;
    for (int i = optind; i < argc; i++)
        ret |= rm_one(mdir, argv[i], tell ? &dm : NULL, have_cfg ? &cfg : NULL);
    ebb_config_fini(&cfg);
    return ret;
}
