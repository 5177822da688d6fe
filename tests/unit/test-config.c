/* Config: defaults and paths, INI files with their errors, EBB_* variables, flags, precedence,
 * printing with secrets masked, and the reload diff. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/config.h"

static char tmpdir[64];

static const char *const env_vars[] = {
    "EBB_HOST",
    "EBB_PORT",
    "EBB_MODEL",
    "EBB_MODELS_DIR",
    "EBB_CACHE_DIR",
    "EBB_CTX",
    "EBB_PARALLEL",
    "EBB_QUEUE",
    "EBB_MAX_BODY",
    "EBB_REQUEST_TIMEOUT",
    "EBB_API_KEY",
    "EBB_CORS_ORIGIN",
    "EBB_DEVICE",
    "EBB_CHAT_TEMPLATE",
    "EBB_LOG_LEVEL",
    "EBB_LOG_FORMAT",
    "EBB_SHUTDOWN_GRACE",
    "EBB_MEMORY_BUDGET",
    "EBB_PREFETCH",
    "EBB_CONFIG",
    "EBB_TEMPERATURE",
    "EBB_TOP_K",
    "EBB_TOP_P",
    "EBB_MIN_P",
    "EBB_REPEAT_PENALTY",
    "EBB_REPEAT_LAST_N",
    "EBB_PRESENCE_PENALTY",
    "EBB_FREQUENCY_PENALTY",
    "EBB_MODEL_SAMPLING",
    "STATE_DIRECTORY",
    "CACHE_DIRECTORY",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
};

/* Every test starts from a clean environment whose config search finds nothing. */
static int setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
        unsetenv(env_vars[i]);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/ebb-test-config-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    setenv("XDG_CONFIG_HOME", tmpdir, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes text to <tmpdir>/<name> and returns the path (static buffer). */
static const char *write_file(const char *name, const char *text)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_defaults(void **state)
{
    (void)state;
    struct ebb_config c;
    setenv("HOME", "/home/someone", 1);
    assert_int_equal(ebb_config_init(&c), EBB_OK);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8077);
    assert_null(c.model);
    assert_int_equal(c.parallel, 4);
    assert_int_equal(c.max_body, 4u << 20);
    assert_int_equal(c.shutdown_grace_ms, 10000);
    assert_int_equal(c.log_level, EBB_LOG_INFO);
    assert_int_equal(c.api_keys.n, 0);
    assert_string_equal(c.models_dir, "/home/someone/.local/share/ebb/models");
    assert_string_equal(c.cache_dir, "/home/someone/.cache/ebb");
    assert_int_equal(c.source[EBB_CFG_PORT], EBB_CONFIG_SRC_DEFAULT);
    ebb_config_fini(&c);

    setenv("XDG_DATA_HOME", "/data", 1);
    setenv("XDG_CACHE_HOME", "relative/ignored", 1);
    assert_int_equal(ebb_config_init(&c), EBB_OK);
    assert_string_equal(c.models_dir, "/data/ebb/models");
    assert_string_equal(c.cache_dir, "/home/someone/.cache/ebb");
    ebb_config_fini(&c);

    /* A system service: systemd's StateDirectory=/CacheDirectory= win over XDG. */
    setenv("STATE_DIRECTORY", "/var/lib/ebb:/var/lib/other", 1);
    setenv("CACHE_DIRECTORY", "/var/cache/ebb", 1);
    assert_int_equal(ebb_config_init(&c), EBB_OK);
    assert_string_equal(c.models_dir, "/var/lib/ebb/models");
    assert_string_equal(c.cache_dir, "/var/cache/ebb");
    ebb_config_fini(&c);
    ebb_config_fini(NULL);
}

static void test_file_values(void **state)
{
    (void)state;
    const char *path = write_file("good.conf", "# comment\n"
                                               "host = 0.0.0.0\n"
                                               "port=9000\n"
                                               "; another comment\n"
                                               "\n"
                                               "[serve]\n"
                                               "    max_body = 8MiB   ; inline comment\n"
                                               "    shutdown_grace = 1500ms\n"
                                               "api_key = k1, k2 ,,k3\n"
                                               "cors_origin = *\n"
                                               "memory_budget = 2G\n"
                                               "request_timeout = 2m\n"
                                               "log_level = debug\n"
                                               "log_format = json\n"
                                               "model = ~/m.gguf\n"
                                               "ctx = 2048\n"
                                               "kv_type = q8_0\n");
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    setenv("HOME", "/home/someone", 1);
    ebb_config_init(&c);
    assert_int_equal(ebb_config_load_file(&c, path, &d), EBB_OK);
    assert_string_equal(c.host, "0.0.0.0");
    assert_int_equal(c.port, 9000);
    assert_int_equal(c.max_body, 8u << 20);
    assert_int_equal(c.shutdown_grace_ms, 1500);
    assert_int_equal(c.api_keys.n, 3);
    assert_string_equal(c.api_keys.items[0], "k1");
    assert_string_equal(c.api_keys.items[1], "k2");
    assert_string_equal(c.api_keys.items[2], "k3");
    assert_int_equal(c.cors_origins.n, 1);
    assert_string_equal(c.cors_origins.items[0], "*");
    assert_int_equal(c.memory_budget, 2ull << 30);
    assert_int_equal(c.request_timeout_ms, 120000);
    assert_int_equal(c.log_level, EBB_LOG_DEBUG);
    assert_int_equal(c.log_format, EBB_LOG_JSON);
    assert_string_equal(c.model, "/home/someone/m.gguf");
    assert_int_equal(c.ctx, 2048);
    assert_int_equal(c.kv_type, EBB_KV_Q8_0);
    assert_string_equal(c.config_file, path);
    assert_int_equal(c.source[EBB_CFG_PORT], EBB_CONFIG_SRC_FILE);
    assert_int_equal(c.source_line[EBB_CFG_PORT], 3);
    assert_int_equal(c.source_line[EBB_CFG_SHUTDOWN_GRACE], 8);
    assert_int_equal(c.source[EBB_CFG_DEVICE], EBB_CONFIG_SRC_DEFAULT);
    ebb_config_fini(&c);
}

/* Loads text and checks the error code and that the message contains want. */
static void expect_file_error(const char *text, ebb_err want_rc, const char *want)
{
    const char *path = write_file("bad.conf", text);
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    ebb_err rc = ebb_config_load_file(&c, path, &d);
    if (rc != want_rc || !strstr(d.msg, want))
        fail_msg("got %s \"%s\", want %s containing \"%s\"", ebb_err_name(rc), d.msg,
                 ebb_err_name(want_rc), want);
    ebb_config_fini(&c);
}

static void test_file_errors(void **state)
{
    (void)state;
    char want[256];
    snprintf(want, sizeof(want), "%s/bad.conf:3: colour: unknown option", tmpdir);
    expect_file_error("host = ::1\n\ncolour = blue\n", EBB_EINVAL, want);
    expect_file_error("port = 99999\n", EBB_EINVAL,
                      "bad.conf:1: port: '99999' is not a whole number in 0..65535");
    expect_file_error("# x\nparallel = 0\n", EBB_EINVAL, ":2: parallel: '0' is not a whole number");
    expect_file_error("port = 80a\n", EBB_EINVAL, ":1: port: '80a'");
    expect_file_error("max_body = 1.5G\n", EBB_EINVAL, ":1: max_body: '1.5G' is not a size");
    expect_file_error("max_body = -1\n", EBB_EINVAL, ":1: max_body: '-1' is not a size");
    expect_file_error("memory_budget = 99999999999999999999\n", EBB_EINVAL, ":1: memory_budget");
    expect_file_error("memory_budget = 17179869184T\n", EBB_EINVAL, ":1: memory_budget");
    expect_file_error("shutdown_grace = 10 s\n", EBB_EINVAL, ":1: shutdown_grace: '10 s'");
    expect_file_error("log_level = loud\n", EBB_EINVAL,
                      ":1: log_level: 'loud' is not one of error, warn, info, debug");
    expect_file_error("log_format = xml\n", EBB_EINVAL, ":1: log_format: 'xml'");
    expect_file_error("kv_type = q4_0\n", EBB_EINVAL,
                      ":1: kv_type: 'q4_0' is not one of f16, q8_0");
    expect_file_error("host =\n", EBB_EINVAL, ":1: host: must not be empty");
    expect_file_error("port = 1\njust some words\n", EBB_EINVAL, ":2: syntax error");
    expect_file_error("[server]\nport = 1\n", EBB_EINVAL, ":1: unknown section [server]");
    /* The first error is the one reported, whichever kind it is. */
    expect_file_error("port = 1\nnonsense\nbogus = 1\n", EBB_EINVAL, ":2: syntax error");
    expect_file_error("port = 1\nbogus = 1\nnonsense\n", EBB_EINVAL, ":2: bogus: unknown option");
    /* Lines longer than inih's buffer: a long comment is fine and does not throw the line count
     * off; a long key line is an error of its own. */
    char longtext[1024];
    memset(longtext, 0, sizeof(longtext));
    strcat(longtext, "# ");
    memset(longtext + 2, 'x', 600);
    strcat(longtext, "\nport = 1\nbogus = 2\n");
    expect_file_error(longtext, EBB_EINVAL, ":3: bogus: unknown option");
    memset(longtext, 0, sizeof(longtext));
    strcat(longtext, "port = 1\nmodel = ");
    memset(longtext + strlen(longtext), 'm', 300);
    strcat(longtext, "\nbogus = 2\n");
    expect_file_error(longtext, EBB_EINVAL, ":2: line longer than");

    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    assert_int_equal(ebb_config_load_file(&c, "/nonexistent/ebb.conf", &d), EBB_ENOENT);
    assert_non_null(strstr(d.msg, "/nonexistent/ebb.conf: cannot open config file"));
    ebb_config_fini(&c);
}

static void test_env(void **state)
{
    (void)state;
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    setenv("EBB_PORT", "9001", 1);
    setenv("EBB_API_KEY", "a, b", 1);
    setenv("EBB_ALLOWED_HOSTS", "ebb.example, proxy.lan:8443", 1);
    setenv("EBB_MODELS_DIR", "/models", 1);
    setenv("EBB_HOST", "", 1); /* empty counts as unset */
    setenv("EBB_SOMETHING_ELSE", "x", 1);
    assert_int_equal(ebb_config_apply_env(&c, &d), EBB_OK);
    assert_int_equal(c.port, 9001);
    assert_int_equal(c.api_keys.n, 2);
    assert_string_equal(c.api_keys.items[1], "b");
    assert_int_equal(c.allowed_hosts.n, 2);
    assert_string_equal(c.allowed_hosts.items[0], "ebb.example");
    assert_string_equal(c.allowed_hosts.items[1], "proxy.lan:8443");
    assert_int_equal(c.source[EBB_CFG_ALLOWED_HOSTS], EBB_CONFIG_SRC_ENV);
    assert_string_equal(c.models_dir, "/models");
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.source[EBB_CFG_PORT], EBB_CONFIG_SRC_ENV);
    assert_int_equal(c.source[EBB_CFG_HOST], EBB_CONFIG_SRC_DEFAULT);

    setenv("EBB_LOG_LEVEL", "loud", 1);
    assert_int_equal(ebb_config_apply_env(&c, &d), EBB_EINVAL);
    assert_string_equal(d.msg, "EBB_LOG_LEVEL: 'loud' is not one of error, warn, info, debug");
    unsetenv("EBB_SOMETHING_ELSE");
    unsetenv("EBB_ALLOWED_HOSTS");
    ebb_config_fini(&c);
}

static void test_flags(void **state)
{
    (void)state;
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    assert_int_equal(ebb_config_set(&c, "max-body", "512k", EBB_CONFIG_SRC_FLAG, 0, &d), EBB_OK);
    assert_int_equal(c.max_body, 512u << 10);
    assert_int_equal(ebb_config_set(&c, "model", "", EBB_CONFIG_SRC_FLAG, 0, &d), EBB_OK);
    assert_null(c.model);
    assert_int_equal(ebb_config_set(&c, "frobnicate", "1", EBB_CONFIG_SRC_FLAG, 0, &d),
                     EBB_ENOTFOUND);
    assert_string_equal(d.msg, "--frobnicate: unknown option");
    assert_int_equal(ebb_config_set(&c, "port", "http", EBB_CONFIG_SRC_FLAG, 0, &d), EBB_EINVAL);
    assert_string_equal(d.msg, "--port: 'http' is not a whole number in 0..65535");
    assert_true(ebb_config_is_key("chat-template"));
    assert_true(ebb_config_is_key("chat_template"));
    assert_false(ebb_config_is_key("config"));
    assert_string_equal(ebb_config_key_name(EBB_CFG_MAX_BODY), "max_body");
    assert_null(ebb_config_key_name(EBB_CFG_N_KEYS));
    /* expert_cache: a count, or auto (the slots memory_budget leaves), printed back as auto */
    assert_int_equal(ebb_config_set(&c, "expert-cache", "8", EBB_CONFIG_SRC_FLAG, 0, &d), EBB_OK);
    assert_int_equal(c.expert_cache, 8);
    assert_int_equal(ebb_config_set(&c, "expert-cache", "auto", EBB_CONFIG_SRC_FLAG, 0, &d),
                     EBB_OK);
    assert_int_equal(c.expert_cache, EBB_CONFIG_EXPERT_CACHE_AUTO);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ebb_config_print(&c, f);
    fclose(f);
    assert_non_null(strstr(buf, "expert_cache    = auto "));
    free(buf);
    assert_int_equal(ebb_config_set(&c, "expert-cache", "some", EBB_CONFIG_SRC_FLAG, 0, &d),
                     EBB_EINVAL);
    assert_string_equal(d.msg, "--expert-cache: 'some' is not a whole number in 0..65536, or auto");
    ebb_config_fini(&c);
}

/* flags > environment > file > defaults, through the one call serve.c makes. */
static void test_precedence(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s",
             write_file("p.conf", "port = 1000\nqueue = 5\nhost = ::1\n"));
    struct ebb_config_arg flags[] = {{"port", "3000"}};
    struct ebb_config c;
    struct ebb_diag d = {{0}};

    setenv("EBB_PORT", "2000", 1);
    setenv("EBB_QUEUE", "6", 1);
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, flags, 1, &d), EBB_OK);
    assert_int_equal(c.port, 3000);
    assert_int_equal(c.queue, 6);
    assert_string_equal(c.host, "::1");
    assert_int_equal(c.parallel, 4);
    assert_int_equal(c.source[EBB_CFG_PORT], EBB_CONFIG_SRC_FLAG);
    assert_int_equal(c.source[EBB_CFG_QUEUE], EBB_CONFIG_SRC_ENV);
    assert_int_equal(c.source[EBB_CFG_HOST], EBB_CONFIG_SRC_FILE);
    ebb_config_fini(&c);

    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, NULL, 0, &d), EBB_OK);
    assert_int_equal(c.port, 2000);
    ebb_config_fini(&c);

    unsetenv("EBB_PORT");
    unsetenv("EBB_QUEUE");
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, NULL, 0, &d), EBB_OK);
    assert_int_equal(c.port, 1000);
    ebb_config_fini(&c);

    /* No --config: $EBB_CONFIG, then $XDG_CONFIG_HOME/ebb/ebb.conf. */
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, NULL, NULL, 0, &d), EBB_OK);
    assert_null(c.config_file);
    assert_int_equal(c.port, 8077);
    ebb_config_fini(&c);

    char dir[128];
    snprintf(dir, sizeof(dir), "%s/ebb", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    write_file("ebb/ebb.conf", "port = 4000\n");
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, NULL, NULL, 0, &d), EBB_OK);
    assert_int_equal(c.port, 4000);
    ebb_config_fini(&c);

    setenv("EBB_CONFIG", path, 1);
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, NULL, NULL, 0, &d), EBB_OK);
    assert_int_equal(c.port, 1000);
    ebb_config_fini(&c);

    /* An explicit file that is missing or bad is an error; so is a bad flag. */
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, "/nonexistent.conf", NULL, 0, &d), EBB_ENOENT);
    ebb_config_fini(&c);
    struct ebb_config_arg bad[] = {{"ctx", "lots"}};
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, bad, 1, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "--ctx: 'lots'"));
    ebb_config_fini(&c);
    unsetenv("EBB_CONFIG");
}

static char *print_to_string(const struct ebb_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ebb_config_print(c, f);
    fclose(f);
    return buf;
}

static void test_print_masks_secrets(void **state)
{
    (void)state;
    const char *path = write_file("s.conf", "api_key = sekrit-one,sekrit-two\nport = 0\n");
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    assert_int_equal(ebb_config_load_file(&c, path, &d), EBB_OK);
    ebb_config_set(&c, "shutdown-grace", "250ms", EBB_CONFIG_SRC_FLAG, 0, &d);
    char *out = print_to_string(&c);
    assert_null(strstr(out, "sekrit"));
    assert_non_null(strstr(out, "********,********"));
    assert_non_null(strstr(out, "port            = 0"));
    assert_non_null(strstr(out, "; file line 2"));
    assert_non_null(strstr(out, "250ms"));
    assert_non_null(strstr(out, "max_body        = 4M "));
    assert_non_null(strstr(out, path));
    free(out);

    /* The printed text (masked keys aside) is itself a valid config file. */
    ebb_config_set(&c, "api_key", "", EBB_CONFIG_SRC_FLAG, 0, &d);
    out = print_to_string(&c);
    const char *again = write_file("again.conf", out);
    struct ebb_config c2;
    ebb_config_init(&c2);
    assert_int_equal(ebb_config_load_file(&c2, again, &d), EBB_OK);
    assert_int_equal(ebb_config_diff(&c, &c2), 0);
    assert_int_equal(c2.shutdown_grace_ms, 250);
    ebb_config_fini(&c2);
    free(out);
    ebb_config_fini(&c);

    char *u = NULL;
    size_t ul = 0;
    FILE *f = open_memstream(&u, &ul);
    ebb_config_usage(f);
    fclose(f);
    assert_non_null(strstr(u, "--max-body SIZE"));
    assert_non_null(strstr(u, "(default 8077)"));
    free(u);
}

static void test_diff(void **state)
{
    (void)state;
    struct ebb_config a, b;
    struct ebb_diag d;
    ebb_config_init(&a);
    ebb_config_init(&b);
    assert_int_equal(ebb_config_diff(&a, &b), 0);
    ebb_config_set(&b, "log_level", "debug", EBB_CONFIG_SRC_FILE, 1, &d);
    assert_int_equal(ebb_config_diff(&a, &b), EBB_CONFIG_CHANGE_LOG);
    ebb_config_set(&b, "api_key", "x", EBB_CONFIG_SRC_FILE, 1, &d);
    ebb_config_set(&b, "max_body", "1M", EBB_CONFIG_SRC_FILE, 1, &d);
    assert_int_equal(ebb_config_diff(&a, &b),
                     EBB_CONFIG_CHANGE_LOG | EBB_CONFIG_CHANGE_AUTH | EBB_CONFIG_CHANGE_LIMITS);
    ebb_config_fini(&b);
    ebb_config_init(&b);
    ebb_config_set(&a, "api_key", "x,y", EBB_CONFIG_SRC_FILE, 1, &d);
    ebb_config_set(&b, "api_key", "x,z", EBB_CONFIG_SRC_FILE, 1, &d);
    ebb_config_set(&b, "cors_origin", "http://a", EBB_CONFIG_SRC_FILE, 1, &d);
    ebb_config_set(&b, "model", "other.gguf", EBB_CONFIG_SRC_FILE, 1, &d);
    ebb_config_set(&a, "allowed_hosts", "ebb.example", EBB_CONFIG_SRC_FILE, 1, &d);
    ebb_config_set(&b, "port", "1", EBB_CONFIG_SRC_FILE, 1, &d);
    assert_int_equal(ebb_config_diff(&a, &b), EBB_CONFIG_CHANGE_AUTH | EBB_CONFIG_CHANGE_CORS |
                                                  EBB_CONFIG_CHANGE_MODEL |
                                                  EBB_CONFIG_CHANGE_LISTEN);
    ebb_config_fini(&a);
    ebb_config_fini(&b);
}

/* Where needle starts in text; fails the test when it is absent. */
static size_t offset_of(const char *text, const char *needle)
{
    const char *p = strstr(text, needle);
    if (!p)
        fail_msg("'%s' not in:\n%s", needle, text ? text : "(null)");
    return (size_t)(p - text);
}

/* The [generation] section: the file, EBB_* variables and flags set the configured generation
 * defaults (with the usual precedence), bad values and misplaced keys name key and line. */
static void test_generation(void **state)
{
    (void)state;
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    assert_int_equal(c.generation.mask, 0);
    assert_true(c.model_sampling);
    assert_true(fabsf(c.generation.v.temperature - 0.8f) < 1e-6f);
    ebb_config_fini(&c);

    char path[128];
    snprintf(path, sizeof(path), "%s",
             write_file("g.conf", "port = 1000\n"
                                  "[generation]\n"
                                  "temperature = 0.2\n"
                                  "  top_k = 10\n"
                                  "repeat_last_n = -1 ; the whole history\n"
                                  "model_sampling = off\n"
                                  "[serve]\n"
                                  "queue = 3\n"));
    ebb_config_init(&c);
    assert_int_equal(ebb_config_load_file(&c, path, &d), EBB_OK);
    assert_int_equal(c.port, 1000);
    assert_int_equal(c.queue, 3);
    assert_true(fabsf(c.generation.v.temperature - 0.2f) < 1e-6f);
    assert_int_equal(c.generation.v.top_k, 10);
    assert_int_equal(c.generation.v.repeat_last_n, -1);
    assert_false(c.model_sampling);
    assert_int_equal(c.generation.mask, EBB_DEF_BIT(EBB_DEF_TEMPERATURE) |
                                            EBB_DEF_BIT(EBB_DEF_TOP_K) |
                                            EBB_DEF_BIT(EBB_DEF_REPEAT_LAST_N));
    assert_int_equal(c.source[EBB_CFG_TOP_K], EBB_CONFIG_SRC_FILE);
    assert_int_equal(c.source_line[EBB_CFG_TOP_K], 4);
    assert_int_equal(c.source[EBB_CFG_TOP_P], EBB_CONFIG_SRC_DEFAULT);
    /* The configured values resolve over the built-in ones. */
    struct ebb_gen_defaults gd;
    ebb_defaults_resolve(NULL, &c.generation, &gd);
    assert_int_equal(gd.v.top_k, 10);
    assert_int_equal(gd.src[EBB_DEF_TOP_K], EBB_DEF_SRC_CONFIG);
    assert_true(fabsf(gd.v.top_p - 0.95f) < 1e-6f);
    assert_int_equal(gd.src[EBB_DEF_TOP_P], EBB_DEF_SRC_BUILTIN);
    /* --check-config prints them under a [generation] header, so the output reads back. */
    /* A copy: GCC 12 takes pointers into open_memstream's buffer for dangling ones. */
    char *printed = print_to_string(&c), *text = strdup(printed);
    free(printed);
    if (!text)
        fail_msg("out of memory");
    size_t at_gen = offset_of(text, "[generation]\n");
    assert_true(at_gen < offset_of(text, "temperature     = 0.2 "));
    assert_true(at_gen < offset_of(text, "; file line 3"));
    assert_true(offset_of(text, "queue") < at_gen);
    free(text);
    ebb_config_fini(&c);

    /* Precedence as for every option: flag > environment > file. */
    struct ebb_config_arg flags[] = {{"top-p", "0.5"}, {"temperature", "1"}};
    setenv("EBB_TEMPERATURE", "0.3", 1);
    setenv("EBB_MIN_P", "0", 1);
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, flags, 2, &d), EBB_OK);
    assert_true(c.generation.v.temperature == 1.0f);
    assert_true(fabsf(c.generation.v.top_p - 0.5f) < 1e-6f);
    assert_true(c.generation.v.min_p == 0.0f);
    assert_int_equal(c.generation.v.top_k, 10);
    assert_int_equal(c.source[EBB_CFG_TEMPERATURE], EBB_CONFIG_SRC_FLAG);
    assert_int_equal(c.source[EBB_CFG_MIN_P], EBB_CONFIG_SRC_ENV);
    assert_true(c.generation.mask & EBB_DEF_BIT(EBB_DEF_MIN_P));
    ebb_config_fini(&c);
    unsetenv("EBB_MIN_P");

    setenv("EBB_TEMPERATURE", "warm", 1);
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, NULL, 0, &d), EBB_EINVAL);
    assert_string_equal(d.msg, "EBB_TEMPERATURE: 'warm' is not a number between 0 and 2");
    ebb_config_fini(&c);
    unsetenv("EBB_TEMPERATURE");
    struct ebb_config_arg bad[] = {{"top-k", "-3"}};
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, bad, 1, &d), EBB_EINVAL);
    assert_string_equal(d.msg, "--top-k: '-3' is not a whole number between 0 and 1073741824");
    ebb_config_fini(&c);

    /* Bad values and misplaced keys in the file name the key and the line. */
    expect_file_error("[generation]\n# comment\ntemperature = hot\n", EBB_EINVAL,
                      "bad.conf:3: temperature: 'hot' is not a number between 0 and 2");
    expect_file_error("[generation]\ntop_p = 1.5\n", EBB_EINVAL,
                      "bad.conf:2: top_p: '1.5' is not a number between 0 and 1");
    expect_file_error("[generation]\ntop_k = 4.5\n", EBB_EINVAL,
                      ":2: top_k: '4.5' is not a whole number between 0 and 1073741824");
    expect_file_error("[generation]\nrepeat_penalty = 0\n", EBB_EINVAL,
                      ":2: repeat_penalty: '0' is not a number between 0.01 and 10");
    expect_file_error("[generation]\nmodel_sampling = maybe\n", EBB_EINVAL,
                      ":2: model_sampling: 'maybe' is not one of true, false");
    expect_file_error("port = 1\ntemperature = 0.5\n", EBB_EINVAL,
                      "bad.conf:2: temperature: belongs under [generation]");
    expect_file_error("[serve]\nmin_p = 0.1\n", EBB_EINVAL,
                      ":2: min_p: belongs under [generation]");
    expect_file_error(
        "[generation]\nport = 1\n", EBB_EINVAL,
        ":2: port: belongs at the top of the file or under [serve], not [generation]");
    expect_file_error("[generation]\ntemp = 1\n", EBB_EINVAL, ":2: temp: unknown option");
    expect_file_error("[sampling]\ntemperature = 1\n", EBB_EINVAL,
                      ":1: unknown section [sampling]");

    /* A reload sees a changed default. */
    struct ebb_config a, b;
    ebb_config_init(&a);
    ebb_config_init(&b);
    ebb_config_set(&b, "min_p", "0.1", EBB_CONFIG_SRC_FILE, 1, &d);
    assert_int_equal(ebb_config_diff(&a, &b), EBB_CONFIG_CHANGE_GENERATION);
    ebb_config_fini(&b);
    ebb_config_init(&b);
    ebb_config_set(&b, "model_sampling", "no", EBB_CONFIG_SRC_FILE, 1, &d);
    assert_int_equal(ebb_config_diff(&a, &b), EBB_CONFIG_CHANGE_GENERATION);
    ebb_config_fini(&a);
    ebb_config_fini(&b);
    assert_string_equal(ebb_config_key_section("top-k"), "generation");
    assert_string_equal(ebb_config_key_section("port"), "serve");
    assert_null(ebb_config_key_section("bogus"));
}

static void test_model_path(void **state)
{
    (void)state;
    struct ebb_config c;
    struct ebb_diag d;
    char buf[256], want[256];
    ebb_config_init(&c);
    assert_int_equal(ebb_config_model_path(&c, buf, sizeof(buf)), EBB_ENOENT);
    ebb_config_set(&c, "models_dir", tmpdir, EBB_CONFIG_SRC_FLAG, 0, &d);
    write_file("tiny.gguf", "GGUF");
    ebb_config_set(&c, "model", "tiny", EBB_CONFIG_SRC_FLAG, 0, &d);
    assert_int_equal(ebb_config_model_path(&c, buf, sizeof(buf)), EBB_OK);
    snprintf(want, sizeof(want), "%s/tiny.gguf", tmpdir);
    assert_string_equal(buf, want);
    ebb_config_set(&c, "model", "missing", EBB_CONFIG_SRC_FLAG, 0, &d);
    assert_int_equal(ebb_config_model_path(&c, buf, sizeof(buf)), EBB_OK);
    snprintf(want, sizeof(want), "%s/missing", tmpdir);
    assert_string_equal(buf, want);
    ebb_config_set(&c, "model", "/abs/x.gguf", EBB_CONFIG_SRC_FLAG, 0, &d);
    assert_int_equal(ebb_config_model_path(&c, buf, sizeof(buf)), EBB_OK);
    assert_string_equal(buf, "/abs/x.gguf");
    assert_int_equal(ebb_config_model_path(&c, buf, 5), EBB_ERANGE);
    ebb_config_fini(&c);
}

/* [model.NAME] sections (several models) and keep_alive durations. */
static void test_model_sections(void **state)
{
    (void)state;
    double ka = 0;
    assert_true(ebb_config_keep_alive("5m", &ka));
    assert_true(ka == 300);
    assert_true(ebb_config_keep_alive("1h30m", &ka));
    assert_true(ka == 5400);
    assert_true(ebb_config_keep_alive("-1", &ka));
    assert_true(ka < 0);
    assert_true(ebb_config_keep_alive("0", &ka));
    assert_true(ka == 0);
    assert_true(ebb_config_keep_alive("250ms", &ka));
    assert_true(ka == 0.25);
    assert_false(ebb_config_keep_alive("5 minutes", &ka));
    assert_false(ebb_config_keep_alive("", &ka));
    assert_false(ebb_config_keep_alive("m", &ka));

    const char *path = write_file("m.conf", "keep_alive = 10m\nmodels_budget = 2G\n"
                                            "[model.chat]\npath = /m/chat.gguf\npin = true\n"
                                            "ctx = 8192\nparallel = 2\n"
                                            "priority = normal\n"
                                            "[model.fim]\nkeep_alive = -1\npriority = high\n"
                                            "chat_template = chatml\n[serve]\nport = 9\n");
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, NULL, 0, &d), EBB_OK);
    assert_string_equal(c.keep_alive, "10m");
    assert_true(c.models_budget == 2ull << 30);
    assert_int_equal(c.port, 9);
    assert_int_equal(c.n_models, 2);
    assert_string_equal(c.models[0].name, "chat");
    assert_string_equal(c.models[0].path, "/m/chat.gguf");
    assert_true(c.models[0].pin);
    assert_false(c.models[0].priority);
    assert_int_equal(c.models[0].ctx, 8192);
    assert_int_equal(c.models[0].parallel, 2);
    assert_string_equal(c.models[1].name, "fim");
    assert_null(c.models[1].path);
    assert_false(c.models[1].pin);
    assert_true(c.models[1].priority);
    assert_string_equal(c.models[1].keep_alive, "-1");
    assert_string_equal(c.models[1].chat_template, "chatml");
    ebb_config_fini(&c);

    expect_file_error("[model.x]\ncolour = blue\n", EBB_EINVAL,
                      ":2: [model.x] colour: not a key of a [model.NAME] section");
    expect_file_error("[model.x]\npin = maybe\n", EBB_EINVAL, ":2: [model.x] pin: bad value");
    expect_file_error("[model.x]\npriority = urgent\n", EBB_EINVAL,
                      ":2: [model.x] priority: bad value");
    expect_file_error("[model.x]\nparallel = 0\n", EBB_EINVAL, ":2: [model.x] parallel");
    expect_file_error("[model.x]\nkeep_alive = soon\n", EBB_EINVAL, ":2: [model.x] keep_alive");
    expect_file_error("[model.]\npin = true\n", EBB_EINVAL, ":1: unknown section [model.]");
    path = write_file("ka.conf", "keep_alive = later\n");
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, NULL, 0, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "keep_alive: 'later' is not a duration"));
    ebb_config_fini(&c);
}

static void test_reload(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s",
             write_file("r.conf", "api_key = old\nlog_level = info\nport = 9000\n"));
    struct ebb_config_arg flags[] = {{"queue", "3"}};
    struct ebb_config c;
    struct ebb_diag d = {{0}};
    unsigned changed = 0;
    ebb_config_init(&c);
    assert_int_equal(ebb_config_build(&c, path, flags, 1, &d), EBB_OK);

    /* Nothing changed. */
    assert_int_equal(ebb_config_reload(&c, path, flags, 1, &changed, &d), EBB_OK);
    assert_int_equal(changed, 0);

    /* New key, new level, a port change that cannot apply; the flag still wins. */
    write_file("r.conf", "api_key = new1,new2\nlog_level = error\nport = 9001\nqueue = 8\n");
    assert_int_equal(ebb_config_reload(&c, path, flags, 1, &changed, &d), EBB_OK);
    assert_int_equal(changed,
                     EBB_CONFIG_CHANGE_AUTH | EBB_CONFIG_CHANGE_LOG | EBB_CONFIG_CHANGE_LISTEN);
    assert_int_equal(c.api_keys.n, 2);
    assert_string_equal(c.api_keys.items[0], "new1");
    assert_int_equal(c.log_level, EBB_LOG_ERROR);
    assert_int_equal(ebb_log_get_level(), EBB_LOG_ERROR);
    assert_int_equal(c.port, 9000);
    assert_int_equal(c.queue, 3);

    /* A broken file leaves the running configuration alone. */
    write_file("r.conf", "api_key = newer\nport = many\n");
    changed = 12345;
    assert_int_equal(ebb_config_reload(&c, path, flags, 1, &changed, &d), EBB_EINVAL);
    assert_int_equal(changed, 12345);
    assert_non_null(strstr(d.msg, "r.conf:2: port: 'many'"));
    assert_string_equal(c.api_keys.items[0], "new1");
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_TEXT);
    ebb_config_fini(&c);
}

/* Random bytes and random mixes of valid pieces: every file loads or fails with EBB_EINVAL and a
 * message naming the file; nothing crashes (run under ASan/valgrind by the test setups). */
static void test_random_files(void **state)
{
    (void)state;
    static const char *const pieces[] = {"port = 8080\n",
                                         "[serve]\n",
                                         "[x]\n",
                                         "  host = ::1\n",
                                         "api_key = a,b,,\n",
                                         "; c\n",
                                         "# c\n",
                                         "=\n",
                                         "k\n",
                                         "max_body = 9T\n",
                                         "\n",
                                         "\r\n",
                                         "\t",
                                         "model=\n",
                                         "log_level = debug ; x\n",
                                         "\xef\xbb\xbf",
                                         "[",
                                         "]",
                                         "shutdown_grace = 4294967296ms\n"};
    uint32_t seed = 12345;
    char text[600], path[128];
    snprintf(path, sizeof(path), "%s/rand.conf", tmpdir);
    for (int iter = 0; iter < 400; iter++) {
        size_t n = 0;
        while (n < 500) {
            seed = seed * 1664525u + 1013904223u;
            if (iter % 2) {
                text[n++] = (char)(seed >> 24 ? seed >> 24 : 1);
            } else {
                const char *p = pieces[(seed >> 16) % (sizeof(pieces) / sizeof(pieces[0]))];
                size_t l = strlen(p);
                if (n + l >= 500)
                    break;
                memcpy(text + n, p, l);
                n += l;
            }
        }
        text[n] = '\0';
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fwrite(text, 1, n, f);
        fclose(f);
        struct ebb_config c;
        struct ebb_diag d = {{0}};
        ebb_config_init(&c);
        ebb_err rc = ebb_config_load_file(&c, path, &d);
        assert_true(rc == EBB_OK || rc == EBB_EINVAL);
        if (rc)
            assert_non_null(strstr(d.msg, path));
        ebb_config_fini(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_masks_secrets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_diff, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_sections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_files, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
