/* Reading a config file with inih, with line numbers and error messages of our own, and the whole
 * precedence chain (ebb_config_build: file, environment, flags) and its reload on SIGHUP. See
 * config.h for the contracts. The option table and its parsers are config.c's; this file only calls
 * ebb_config_set. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

/* State of one ebb_config_load_file: our reader counts physical lines for inih, which itself
 * passes no line numbers to handlers in the Debian build. */
struct loader {
    struct ebb_config *cfg;
    FILE *fp;
    struct ebb_diag *diag;
    ebb_err rc;
    int err_line; /* line of the first error, 0 if none */
    int line;     /* line inih read last */
    char *buf;    /* getline buffer */
    size_t cap;
    char raw[256]; /* that line without leading blanks */
};

static void loader_fail(struct loader *ld, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Records the first error in the file as EBB_EINVAL, prefixed with file and line. */
static void loader_fail(struct loader *ld, const char *fmt, ...)
{
    if (ld->err_line)
        return; /* the first error is the one reported */
    ld->err_line = ld->line;
    ld->rc = EBB_EINVAL;
    if (ld->diag) {
        char msg[sizeof(ld->diag->msg)];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        ebb_diag_set(ld->diag, EBB_EINVAL, "%s:%d: %s", ld->cfg->config_file, ld->line, msg);
    }
}

/* Gives inih one physical line per call, so that inih's own line numbers (for syntax errors)
 * match ours. inih cuts lines longer than its buffer into pieces that it would parse as lines of
 * their own; we hand it an empty line instead (long comments are fine, a long option line is an
 * error). Also checks section headers, which inih never shows to handlers. */
static char *loader_read(char *str, int num, void *stream)
{
    struct loader *ld = stream;
    ssize_t len = getline(&ld->buf, &ld->cap, ld->fp);
    if (len < 0 || num < 2)
        return NULL;
    ld->line++;
    const char *p = ld->buf;
    while (isspace((unsigned char)*p))
        p++;
    snprintf(ld->raw, sizeof(ld->raw), "%s", p);
    bool comment = *p == '#' || *p == ';';
    if (len > num - 2 && !comment)
        loader_fail(ld, "line longer than %d characters", num - 3);
    if (len > num - 2 || comment) {
        snprintf(str, (size_t)num, "\n");
        return str;
    }
    if (*p == '[') {
        size_t nlen = strcspn(p + 1, "]");
        bool known = (nlen == 5 && !strncmp(p + 1, "serve", 5)) ||
                     (nlen == 10 && !strncmp(p + 1, "generation", 10)) ||
                     (nlen > 6 && !strncmp(p + 1, "model.", 6));
        if (!known)
            loader_fail(ld,
                        "unknown section [%.*s] (options go at the top or under [serve]; "
                        "generation defaults under [generation]; a model under [model.NAME])",
                        (int)(nlen < 63 ? nlen : 63), p + 1);
    }
    memcpy(str, ld->buf, (size_t)len + 1);
    return str;
}

/* Splits an indented "key = value ; comment" line the way inih splits others. */
static bool split_line(char *line, char **key, char **value)
{
    char *eq = strpbrk(line, "=:");
    if (!eq)
        return false;
    *eq = '\0';
    char *k = line, *v = eq + 1;
    for (char *c = v; *c; c++) {
        if (*c == ';' && (c == v || isspace((unsigned char)c[-1]))) {
            *c = '\0';
            break;
        }
    }
    while (isspace((unsigned char)*k))
        k++;
    while (isspace((unsigned char)*v))
        v++;
    for (char *e = k + strlen(k); e > k && isspace((unsigned char)e[-1]);)
        *--e = '\0';
    for (char *e = v + strlen(v); e > v && isspace((unsigned char)e[-1]);)
        *--e = '\0';
    *key = k;
    *value = v;
    return *k != '\0';
}

static int loader_on_kv(void *user, const char *section, const char *name, const char *value)
{
    struct loader *ld = user;
    /* inih takes an indented line after a key as a continuation of that key's value. We have no
     * multi-line values, and people indent keys under [serve]; so when the physical line does
     * not start with the key inih names, it is a key line of its own and we split it here. */
    const char *p = ld->raw;
    size_t nl = strlen(name);
    char line[sizeof(ld->raw)], *k, *v;
    if (strncmp(p, name, nl) != 0 || !strchr(" \t=:", p[nl])) {
        snprintf(line, sizeof(line), "%s", p);
        if (!split_line(line, &k, &v)) {
            loader_fail(ld, "syntax error: expected 'key = value', a comment or a [section]");
            return 0;
        }
        name = k;
        value = v;
    }
    struct ebb_diag d;
    if (section && !strncmp(section, "model.", 6)) {
        /* [model.NAME]: one model of the catalogue (config-models.c). */
        if (ebb_config_model_set(ld->cfg, section + 6, name, value, ld->line, &d)) {
            loader_fail(ld, "[%s] %s", section, d.msg);
            return 0;
        }
        return 1;
    }
    /* Each option has its section: the generation defaults under [generation], the others at
     * the top or under [serve] (inih calls the top "", and our reader rejected other names). */
    const char *want = ebb_config_key_section(name);
    const char *here = section && *section ? section : "serve";
    if (want && strcmp(want, here)) {
        if (!strcmp(want, "generation"))
            loader_fail(ld, "%s: belongs under [generation]", name);
        else
            loader_fail(ld, "%s: belongs at the top of the file or under [serve], not [%s]", name,
                        here);
        return 0;
    }
    ebb_err rc = ebb_config_set(ld->cfg, name, value, EBB_CONFIG_SRC_FILE, ld->line, &d);
    if (rc) {
        /* d already names file, line and key. */
        if (!ld->err_line) {
            ld->err_line = ld->line;
            ld->rc = rc == EBB_ENOTFOUND ? EBB_EINVAL : rc;
            if (ld->diag)
                *ld->diag = d;
        }
        return 0;
    }
    return 1;
}

ebb_err ebb_config_load_file(struct ebb_config *cfg, const char *path, struct ebb_diag *diag)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return ebb_diag_set(diag, EBB_ENOENT, "%s: cannot open config file: %s", path,
                            strerror(errno));
    char *copy = strdup(path);
    if (!copy) {
        fclose(fp);
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    }
    free(cfg->config_file);
    cfg->config_file = copy;
    struct loader ld = {.cfg = cfg, .fp = fp, .diag = diag};
    int r = ini_parse_stream(loader_read, &ld, loader_on_kv, &ld);
    bool read_error = ferror(fp);
    fclose(fp);
    free(ld.buf);
    if (read_error)
        return ebb_diag_set(diag, EBB_EIO, "%s: read error", path);
    if (ld.err_line && (r <= 0 || ld.err_line <= r))
        return ld.rc;
    if (r > 0)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "%s:%d: syntax error: expected 'key = value', a comment or a [section]",
                            path, r);
    if (r < 0)
        return ebb_diag_set(diag, EBB_ENOMEM, "%s: out of memory while parsing", path);
    return EBB_OK;
}

ebb_err ebb_config_build(struct ebb_config *cfg, const char *config_path,
                         const struct ebb_config_arg *flags, size_t n_flags, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    const char *env_path = getenv("EBB_CONFIG");
    if (!config_path && env_path && *env_path)
        config_path = env_path;
    if (config_path) {
        rc = ebb_config_load_file(cfg, config_path, diag);
    } else {
        char *user = ebb_config_user_file();
        const char *cands[] = {user, EBB_SYSCONFDIR "/ebb/ebb.conf"};
        for (size_t i = 0; i < 2 && !rc; i++) {
            if (cands[i] && cands[i][0] && access(cands[i], F_OK) == 0) {
                rc = ebb_config_load_file(cfg, cands[i], diag);
                break;
            }
        }
        free(user);
    }
    if (rc)
        return rc;
    if ((rc = ebb_config_apply_env(cfg, diag)))
        return rc;
    for (size_t i = 0; i < n_flags; i++) {
        rc = ebb_config_set(cfg, flags[i].key, flags[i].value, EBB_CONFIG_SRC_FLAG, 0, diag);
        if (rc)
            return rc;
    }
    double ka;
    if (!ebb_config_keep_alive(cfg->keep_alive, &ka))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "keep_alive: '%.100s' is not a duration (5m, 1h30m), a number of "
                            "seconds, -1 (forever) or 0",
                            cfg->keep_alive);
    return EBB_OK;
}

ebb_err ebb_config_reload(struct ebb_config *cfg, const char *config_path,
                          const struct ebb_config_arg *flags, size_t n_flags, unsigned *changed,
                          struct ebb_diag *diag)
{
    struct ebb_config next;
    ebb_err rc = ebb_config_init(&next);
    if (!rc)
        rc = ebb_config_build(&next, config_path, flags, n_flags, diag);
    if (rc) {
        ebb_config_fini(&next);
        return rc;
    }
    unsigned bits = ebb_config_diff(cfg, &next);
    if (bits & EBB_CONFIG_CHANGE_LISTEN) {
        ebb_log_warn("config",
                     "host/port changed to %s:%u: restart ebb to listen there; still "
                     "serving on %s:%u",
                     next.host, (unsigned)next.port, cfg->host, (unsigned)cfg->port);
        /* Keep what the socket really is. */
        char *h = next.host;
        next.host = cfg->host;
        cfg->host = h;
        next.port = cfg->port;
        next.source[EBB_CFG_HOST] = cfg->source[EBB_CFG_HOST];
        next.source[EBB_CFG_PORT] = cfg->source[EBB_CFG_PORT];
        next.source_line[EBB_CFG_HOST] = cfg->source_line[EBB_CFG_HOST];
        next.source_line[EBB_CFG_PORT] = cfg->source_line[EBB_CFG_PORT];
    }
    if (bits & EBB_CONFIG_CHANGE_LOG)
        ebb_log_configure(next.log_level, next.log_format);
    ebb_config_fini(cfg);
    *cfg = next;
    *changed = bits;
    return EBB_OK;
}
