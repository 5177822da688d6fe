/* Checks config/ebb.conf against the option table: every option appears exactly once as a
 * commented "#key = value" line with a comment above it, the file loads as shipped (changing
 * nothing), and with every line uncommented it loads and equals the built-in defaults, so the
 * documented defaults are the real ones. usage: check-sample-config PATH/TO/ebb.conf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s ebb.conf\n", argv[0]);
        return 2;
    }
    /* Defaults must not depend on the caller's environment. */
    const char *vars[] = {"XDG_DATA_HOME", "XDG_CACHE_HOME", "STATE_DIRECTORY", "CACHE_DIRECTORY"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    setenv("HOME", "/home/sample", 1);

    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    char *lines[512];
    size_t n = 0;
    char buf[1024];
    while (n < 512 && fgets(buf, sizeof(buf), f))
        lines[n++] = strdup(buf);
    fclose(f);

    for (int k = 0; k < EBB_CFG_N_KEYS; k++) {
        const char *name = ebb_config_key_name((enum ebb_config_key)k);
        char want[80];
        snprintf(want, sizeof(want), "#%s =", name);
        int seen = 0;
        for (size_t i = 0; i < n; i++) {
            if (!strncmp(lines[i], want, strlen(want))) {
                seen++;
                CHECK(i > 0 && lines[i - 1][0] == '#' && lines[i - 1][1] == ' ',
                      "%s: no comment documents it (line %zu)", name, i + 1);
            }
        }
        CHECK(seen == 1, "option %s appears %d times as '%s ...' (want 1)", name, seen, want);
    }

    struct ebb_config def, shipped, open_;
    struct ebb_diag d = {{0}};
    ebb_config_init(&def);
    ebb_config_init(&shipped);
    ebb_err rc = ebb_config_load_file(&shipped, argv[1], &d);
    CHECK(rc == EBB_OK, "shipped file does not load: %s", d.msg);
    CHECK(ebb_config_diff(&def, &shipped) == 0, "shipped file changes settings");

    char tmp[] = "/tmp/ebb-sample-XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    FILE *o = fdopen(fd, "w");
    for (size_t i = 0; i < n; i++) {
        /* "#key = value" lines become "key = value"; prose comments ("# ...") stay. */
        bool setting = lines[i][0] == '#' && lines[i][1] != ' ' && lines[i][1] != '\n' &&
                       strchr(lines[i], '=');
        fputs(setting ? lines[i] + 1 : lines[i], o);
    }
    fclose(o);
    ebb_config_init(&open_);
    rc = ebb_config_load_file(&open_, tmp, &d);
    CHECK(rc == EBB_OK, "uncommented file does not load: %s", d.msg);
    unlink(tmp);
    /* The model line shows an example rather than the (empty) default. */
    CHECK(open_.model != NULL, "model example missing");
    free(open_.model);
    open_.model = NULL;
    unsigned diff = ebb_config_diff(&def, &open_);
    CHECK(diff == 0, "documented defaults differ from the built-in ones (change bits 0x%x)", diff);
    for (int k = 0; k < EBB_CFG_N_KEYS; k++)
        CHECK(open_.source[k] == EBB_CONFIG_SRC_FILE, "%s not set by the uncommented file",
              ebb_config_key_name((enum ebb_config_key)k));
    if (diff) {
        ebb_config_print(&def, stderr);
        ebb_config_print(&open_, stderr);
    }

    ebb_config_fini(&def);
    ebb_config_fini(&shipped);
    ebb_config_fini(&open_);
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    if (failures)
        return 1;
    printf("ok: %d options documented; sample loads; documented defaults match\n",
           (int)EBB_CFG_N_KEYS);
    return 0;
}
