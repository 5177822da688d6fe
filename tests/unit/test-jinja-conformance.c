/* Chat template conformance: renders the ~70 reference templates (fetched into a cache by
 * scripts/fetch-chat-templates.sh, not committed) with ebb's Jinja interpreter over the
 * conversations in tests/data/chat-templates/expected/conversations.json and compares each
 * result byte for byte with what Python's jinja2 gave (expected/<template>.json, made by
 * gen-conformance.py). A template conforms when every case matches: the same text, or an error
 * where jinja2 raised one. Prints the figure and, for every miss, the case and the construct or
 * error behind it; fails below 90% of the templates, and fails (never skips) when the cached
 * templates are missing. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/jinja/jinja.h"

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = 0;
    *n = len;
    return buf;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Prints where two texts first differ, with a little context of each. */
static void show_diff(const char *want, size_t wn, const char *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    printf("      first difference at byte %zu (want %zu bytes, got %zu)\n", i, wn, gn);
    printf("      want: ");
    json_t *s = json_stringn(want + from, (i + 60 < wn ? i + 60 : wn) - from);
    char *d = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    printf("%s\n", d ? d : "(not UTF-8 at the cut)");
    free(d);
    json_decref(s);
    printf("      got:  ");
    s = json_stringn(got + from, (i + 60 < gn ? i + 60 : gn) - from);
    d = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    printf("%s\n", d ? d : "(not UTF-8 at the cut)");
    free(d);
    json_decref(s);
}

int main(void)
{
    const char *data = EBB_TEST_DATA "/chat-templates/expected";
    const char *dir = getenv("EBB_CHAT_TEMPLATES_DIR");
    char dflt[1024];
    if (!dir || !*dir) {
        const char *home = getenv("HOME");
        snprintf(dflt, sizeof(dflt), "%s/.cache/ebb/chat-templates", home ? home : ".");
        dir = dflt;
    }
    char path[2048];
    json_error_t je;
    snprintf(path, sizeof(path), "%s/conversations.json", data);
    json_t *convs = json_load_file(path, 0, &je);
    if (!convs) {
        fprintf(stderr, "cannot read %s: %s\n", path, je.text);
        return 1;
    }
    DIR *dd = opendir(data);
    if (!dd) {
        fprintf(stderr, "cannot open %s\n", data);
        return 1;
    }
    char **names = NULL;
    size_t n_names = 0;
    for (struct dirent *de; (de = readdir(dd));) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json") &&
            strcmp(de->d_name, "conversations.json")) {
            names = realloc(names, (n_names + 1) * sizeof(*names));
            names[n_names++] = strdup(de->d_name);
        }
    }
    closedir(dd);
    qsort(names, n_names, sizeof(*names), cmp_names);

    struct tm now = {.tm_year = 125, .tm_mon = 0, .tm_mday = 15, .tm_hour = 10, .tm_min = 30};
    timegm(&now); /* fills in the weekday and day of the year */
    size_t pass = 0, total = 0, cases_ok = 0, cases_all = 0;
    int missing = 0;
    for (size_t i = 0; i < n_names; i++) {
        snprintf(path, sizeof(path), "%s/%s", data, names[i]);
        json_t *exp = json_load_file(path, 0, &je);
        if (!exp) {
            fprintf(stderr, "cannot read %s: %s\n", path, je.text);
            return 1;
        }
        const char *tname = json_string_value(json_object_get(exp, "template"));
        snprintf(path, sizeof(path), "%s/%s", dir, tname);
        size_t n;
        char *src = read_file(path, &n);
        if (!src) {
            if (!missing)
                fprintf(stderr,
                        "MISSING reference template %s: run scripts/fetch-chat-templates.sh "
                        "(or set EBB_CHAT_TEMPLATES_DIR)\n",
                        path);
            missing++;
            json_decref(exp);
            continue;
        }
        total++;
        struct ebb_jinja *t = NULL;
        struct ebb_diag diag = {{0}};
        ebb_err rc = ebb_jinja_parse(src, n, &t, &diag);
        json_t *load_error = json_object_get(exp, "load_error");
        if (rc) {
            if (load_error) {
                pass++;
                printf("ok   %s (both refuse to load)\n", tname);
            } else {
                printf("MISS %s: load error: %s\n", tname, diag.msg);
            }
            free(src);
            json_decref(exp);
            continue;
        }
        if (load_error) {
            printf("MISS %s: loads, but jinja2 refuses it: %s\n", tname,
                   json_string_value(load_error));
            ebb_jinja_free(t);
            free(src);
            json_decref(exp);
            continue;
        }
        json_t *cases = json_object_get(exp, "cases");
        size_t ok = 0, nc = json_array_size(cases);
        for (size_t k = 0; k < nc; k++) {
            json_t *cs = json_array_get(cases, k);
            const char *cid = json_string_value(json_object_get(cs, "conversation"));
            json_t *conv = NULL;
            json_t *cl = json_object_get(convs, "conversations");
            for (size_t j = 0; j < json_array_size(cl); j++)
                if (!strcmp(json_string_value(json_object_get(json_array_get(cl, j), "id")), cid))
                    conv = json_array_get(cl, j);
            json_t *vars = json_object();
            json_object_set(vars, "messages", json_object_get(conv, "messages"));
            json_object_set_new(vars, "tools",
                                json_is_true(json_object_get(conv, "tools"))
                                    ? json_incref(json_object_get(convs, "tools"))
                                    : json_null());
            json_object_set_new(vars, "documents", json_null());
            json_object_set(vars, "add_generation_prompt",
                            json_object_get(cs, "add_generation_prompt"));
            json_object_set(vars, "bos_token", json_object_get(convs, "bos_token"));
            json_object_set(vars, "eos_token", json_object_get(convs, "eos_token"));
            char *out = NULL;
            size_t out_n = 0;
            struct ebb_diag rd = {{0}};
            ebb_err r = ebb_jinja_render(t, vars, &now, NULL, &out, &out_n, &rd);
            json_t *want = json_object_get(cs, "output");
            json_t *werr = json_object_get(cs, "error");
            bool agp = json_is_true(json_object_get(cs, "add_generation_prompt"));
            bool match;
            if (werr) {
                match = r != EBB_OK;
                if (!match)
                    printf("  miss %s [%s, agp=%d]: renders, but jinja2 raised %s\n", tname, cid,
                           agp, json_string_value(werr));
            } else if (r) {
                match = false;
                printf("  miss %s [%s, agp=%d]: %s\n", tname, cid, agp, rd.msg);
            } else {
                match = json_string_length(want) == out_n &&
                        !memcmp(json_string_value(want), out, out_n);
                if (!match) {
                    printf("  miss %s [%s, agp=%d]: different text\n", tname, cid, agp);
                    show_diff(json_string_value(want), json_string_length(want), out, out_n);
                }
            }
            ok += match;
            free(out);
            json_decref(vars);
        }
        cases_ok += ok;
        cases_all += nc;
        if (ok == nc) {
            pass++;
            printf("ok   %s (%zu cases)\n", tname, nc);
        } else {
            printf("MISS %s: %zu of %zu cases match\n", tname, ok, nc);
        }
        ebb_jinja_free(t);
        free(src);
        json_decref(exp);
    }
    for (size_t i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    json_decref(convs);
    if (missing) {
        fprintf(stderr,
                "%d reference templates missing from %s: run "
                "scripts/fetch-chat-templates.sh\n",
                missing, dir);
        return 1;
    }
    double pct = total ? 100.0 * (double)pass / (double)total : 0;
    printf("chat template conformance: %zu of %zu templates match jinja2 byte for byte (%.1f%%); "
           "%zu of %zu cases\n",
           pass, total, pct, cases_ok, cases_all);
    if (pct < 90.0) {
        printf("FAIL: below 90%%\n");
        return 1;
    }
    return 0;
}
