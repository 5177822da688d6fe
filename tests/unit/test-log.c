/* Logging: level filter, text and JSON lines (parsed back with jansson), escaping, truncation,
 * the request line, journald priority prefixes, and whole lines under concurrent writers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

static FILE *sink;

static int setup(void **state)
{
    (void)state;
    unsetenv("JOURNAL_STREAM");
    sink = tmpfile();
    if (!sink)
        return -1;
    ebb_log_set_fd(fileno(sink));
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_TEXT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ebb_log_set_fd(-1);
    fclose(sink);
    return 0;
}

/* Everything written so far; the caller frees it. The sink is then emptied. */
static char *drain(void)
{
    long n = lseek(fileno(sink), 0, SEEK_END);
    char *buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(pread(fileno(sink), buf, (size_t)n, 0), n);
    assert_int_equal(ftruncate(fileno(sink), 0), 0);
    lseek(fileno(sink), 0, SEEK_SET);
    return buf;
}

static void test_levels_and_text(void **state)
{
    (void)state;
    ebb_log_configure(EBB_LOG_WARN, EBB_LOG_TEXT);
    assert_false(ebb_log_enabled(EBB_LOG_INFO));
    assert_true(ebb_log_enabled(EBB_LOG_ERROR));
    ebb_log_info("serve", "hidden %d", 1);
    ebb_log_warn("serve", "shown %d", 2);
    char *out = drain();
    /* "2026-11-22T14:10:00.123Z warn  [serve] shown 2\n" */
    assert_int_equal(strlen(out), 24 + 1 + 5 + 1 + 7 + 1 + 7 + 1);
    assert_memory_equal(out + 23, "Z warn  [serve] shown 2\n", 24);
    free(out);

    ebb_log_configure(EBB_LOG_DEBUG, EBB_LOG_TEXT);
    ebb_log_debug("m", "two\nlines\tand\x01");
    out = drain();
    assert_non_null(strstr(out, "debug [m] two\\nlines\tand\\x01\n"));
    assert_int_equal(strchr(out, '\n') - out, (long)strlen(out) - 1);
    free(out);

    enum ebb_log_level l;
    enum ebb_log_format f;
    assert_true(ebb_log_level_parse("warning", &l) && l == EBB_LOG_WARN);
    assert_false(ebb_log_level_parse("loud", &l));
    assert_true(ebb_log_format_parse("json", &f) && f == EBB_LOG_JSON);
    assert_false(ebb_log_format_parse("JSON", &f));
    assert_string_equal(ebb_log_level_name(EBB_LOG_DEBUG), "debug");
}

/* Parses one JSON line and returns the object (caller decrefs). */
static json_t *parse_line(const char *line)
{
    json_error_t err;
    json_t *j = json_loads(line, 0, &err);
    if (!j)
        fail_msg("not JSON (%s): %s", err.text, line);
    return j;
}

static void test_json(void **state)
{
    (void)state;
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_JSON);
    ebb_log_error("model", "bad \"tensor\" \\ here\n\x02 caf\xc3\xa9 \xff end");
    char *out = drain();
    json_t *j = parse_line(out);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "error");
    assert_string_equal(json_string_value(json_object_get(j, "module")), "model");
    assert_string_equal(json_string_value(json_object_get(j, "msg")),
                        "bad \"tensor\" \\ here\n\x02 caf\xc3\xa9 \xef\xbf\xbd end");
    assert_int_equal(strlen(json_string_value(json_object_get(j, "ts"))), 24);
    json_decref(j);
    free(out);
}

static void test_request_line(void **state)
{
    (void)state;
    struct ebb_log_request r = {
        .method = "POST",
        .path = "/v1/chat/completions",
        .status = 200,
        .prompt_tokens = 12,
        .completion_tokens = 40,
        .ms = 532.14,
        .remote = "127.0.0.1",
        .id = "chatcmpl-1",
    };
    ebb_log_request(&r);
    char *out = drain();
    assert_non_null(strstr(out, " info  [http] POST /v1/chat/completions 200 prompt=12 "
                                "completion=40 ms=532.1 remote=127.0.0.1 id=chatcmpl-1\n"));
    free(out);

    struct ebb_log_request e = {.method = "GET",
                                .path = "/health",
                                .status = 503,
                                .prompt_tokens = -1,
                                .completion_tokens = -1,
                                .ms = 0.2,
                                .error = "model \"x\" loading"};
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_JSON);
    ebb_log_request(&e);
    ebb_log_configure(EBB_LOG_ERROR, EBB_LOG_JSON);
    ebb_log_request(&r); /* info: filtered out */
    out = drain();
    json_t *j = parse_line(out);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "request");
    assert_string_equal(json_string_value(json_object_get(j, "path")), "/health");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 503);
    assert_null(json_object_get(j, "prompt_tokens"));
    assert_null(json_object_get(j, "remote"));
    assert_string_equal(json_string_value(json_object_get(j, "error")), "model \"x\" loading");
    assert_int_equal(strchr(out, '\n') - out, (long)strlen(out) - 1);
    json_decref(j);
    free(out);
}

static void test_truncation_keeps_json_valid(void **state)
{
    (void)state;
    char *big = malloc(20000);
    assert_non_null(big);
    for (int i = 0; i < 19999; i++)
        big[i] = i % 3 == 0 ? '"' : (i % 3 == 1 ? '\x01' : 'x');
    big[19999] = '\0';
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_JSON);
    ebb_log_info("t", "%s", big);
    struct ebb_log_request r = {.method = "GET", .path = big, .status = 404, .ms = 1};
    ebb_log_request(&r);
    char *out = drain();
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_true(strlen(out) < 4096);
    json_t *j = parse_line(out);
    const char *msg = json_string_value(json_object_get(j, "msg"));
    assert_string_equal(msg + strlen(msg) - 3, "...");
    json_decref(j);
    j = parse_line(nl + 1);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 404);
    json_decref(j);
    free(out);

    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_TEXT);
    ebb_log_info("t", "%s", big);
    out = drain();
    assert_true(strlen(out) < 4096);
    assert_string_equal(out + strlen(out) - 4, "...\n");
    free(out);
    free(big);
}

static void test_journald_prefix(void **state)
{
    (void)state;
    struct stat st;
    char js[64];
    assert_int_equal(fstat(fileno(sink), &st), 0);
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    ebb_log_set_fd(fileno(sink)); /* re-probe */
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_TEXT);
    ebb_log_warn("serve", "hello");
    ebb_log_info("serve", "there");
    char *out = drain();
    assert_string_equal(out, "<4>[serve] hello\n<6>[serve] there\n");
    free(out);
    unsetenv("JOURNAL_STREAM");
    ebb_log_set_fd(fileno(sink));
}

static void *writer(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < 500; i++)
        ebb_log_info("t", "writer %ld line %d %s", id, i,
                     "padding padding padding padding padding padding padding padding");
    return NULL;
}

static void test_threads_write_whole_lines(void **state)
{
    (void)state;
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_TEXT);
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer, (void *)i), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    char *out = drain();
    int lines = 0, seen[4] = {0};
    for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
        long id;
        int n;
        *nl = '\0';
        char *w = strstr(p, "[t] writer ");
        assert_non_null(w);
        assert_int_equal(sscanf(w, "[t] writer %ld line %d", &id, &n), 2);
        assert_int_equal(n, seen[id]++); /* each writer's lines whole and in order */
        assert_string_equal(p + strlen(p) - 15, "padding padding");
        lines++;
    }
    assert_int_equal(lines, 2000);
    free(out);
}

static void test_progress(void **state)
{
    (void)state;
    ebb_log_configure(EBB_LOG_INFO, EBB_LOG_TEXT);
    struct ebb_log_progress p;
    ebb_log_progress_begin(&p, "loading m.gguf", 1000000);
    assert_false(p.tty); /* a file, not a terminal */
    int emitted = 0;
    for (uint64_t done = 0; done <= 1000000; done += 50000)
        emitted += ebb_log_progress_update(&p, done);
    char status[256];
    ebb_log_progress_format(&p, status, sizeof(status));
    assert_memory_equal(status, "loading m.gguf: 100% (1.0 of 1.0 MB, ", 36);
    ebb_log_progress_end(&p);
    char *out = drain();
    /* One line per 10 percent (10, 20, ..., 100), then the final one. */
    assert_int_equal(emitted, 10);
    assert_non_null(strstr(out, "[progress] loading m.gguf: 50% (0.5 of 1.0 MB"));
    assert_non_null(strstr(out, "[progress] loading m.gguf done: 1.0 MB in "));
    int lines = 0;
    for (char *q = out; (q = strchr(q, '\n')); q++)
        lines++;
    assert_int_equal(lines, 11);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_levels_and_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation_keeps_json_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_journald_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_write_whole_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
