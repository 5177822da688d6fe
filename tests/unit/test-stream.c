/* The streamer facade: initial plan from the probe, a squeeze posted by the "timer" thread
 * through ebb_stream_probe, slots attached on the first shrink, streamed bytes identical to the
 * file, pressure, the report and its Prometheus text. */
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
#include <unistd.h>

#include "stream/stream.h"

#define N_LAYER 8
#define LAYER 20000

static char path[64], hook[80];
static uint8_t *bytes;

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof(path), "/tmp/ebb-stream-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    snprintf(hook, sizeof(hook), "%s.hook", path);
    size_t n = (size_t)N_LAYER * LAYER + 333;
    bytes = malloc(n);
    for (size_t i = 0; i < n; i++)
        bytes[i] = (uint8_t)(i * 7 + i / 251);
    int ok = write(fd, bytes, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    unlink(hook);
    free(bytes);
    unsetenv("EBB_TEST_MEMPROBE_FILE");
    return 0;
}

static void say(const char *text)
{
    FILE *f = fopen(hook, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void *timer_thread(void *arg)
{
    return ebb_stream_probe(arg) ? (void *)1 : NULL;
}

/* One step: every streamed layer through get/put, bytes checked against the file. */
static void run_step(struct ebb_stream *s)
{
    struct ebb_diag d = {{0}};
    for (uint32_t l = ebb_stream_n_resident(s); l < N_LAYER; l++) {
        const void *data;
        uint32_t slot;
        if (ebb_stream_get(s, l, &data, &slot, &d))
            fail_msg("layer %u: %s", l, d.msg);
        assert_true(slot < 3);
        assert_memory_equal(data, bytes + 333 + (size_t)l * LAYER, LAYER);
        assert_int_equal(ebb_stream_put(s, l), EBB_OK);
    }
}

static void facade(void **state)
{
    (void)state;
    struct ebb_stream_layer ls[N_LAYER];
    uint64_t lb[N_LAYER];
    for (int l = 0; l < N_LAYER; l++) {
        ls[l] = (struct ebb_stream_layer){
            .off = 333 + (uint64_t)l * LAYER, .size = LAYER, .raw_size = LAYER};
        lb[l] = LAYER;
    }
    setenv("EBB_TEST_MEMPROBE_FILE", hook, 1);
    say("available=1M\n");
    struct ebb_stream_params p = {.path = path,
                                  .layers = ls,
                                  .plan = {.n_layer = N_LAYER,
                                           .layer_bytes = lb,
                                           .fixed_bytes = 10000,
                                           .staging_bytes = 3 * 32768,
                                           .kv_per_token = 10,
                                           .n_ctx_want = 100,
                                           .mode = EBB_STREAM_CONTEXT,
                                           .margin = 10000},
                                  .prefetch = 2,
                                  .now_ns = 1000};
    struct ebb_stream *s = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_stream_new(&p, &s, &d), EBB_OK);
    assert_int_equal(ebb_stream_n_resident(s), N_LAYER);
    assert_int_equal(ebb_stream_n_ctx(s), 100);
    assert_false(ebb_stream_needs_slots(s));
    assert_false(ebb_stream_replan_due(s));
    /* The timer thread reads a squeeze: total now 10000 + 1000 + 160000 = 171000; with
     * 120000 available beyond it the limit is 281000 - 10000: still everything. Then 0. */
    say("available=0\n");
    pthread_t t;
    void *pr;
    assert_int_equal(pthread_create(&t, NULL, timer_thread, s), 0);
    pthread_join(t, &pr);
    assert_null(pr);
    assert_true(ebb_stream_replan_due(s));
    struct ebb_stream_change chg;
    assert_true(ebb_stream_replan(s, 2000000000ull, 0, 0, false, &chg));
    assert_false(ebb_stream_replan_due(s));
    /* limit 171000 - 10000 = 161000 >= 11000 + 98304 + 20000 n -> n = 2 */
    assert_int_equal(chg.from, N_LAYER);
    assert_int_equal(chg.to, 2);
    assert_true(ebb_stream_needs_slots(s));
    assert_int_equal(ebb_stream_commit(s, &chg, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "attach"));
    void *slots[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(posix_memalign(&slots[i], 4096, ebb_stream_slot_size(s)), 0);
    assert_int_equal(ebb_stream_attach(s, slots, 3, &d), EBB_OK);
    assert_int_equal(ebb_stream_commit(s, &chg, &d), EBB_OK);
    for (int i = 0; i < 3; i++)
        run_step(s);
    ebb_stream_set_device_memory(s, 1 << 30, 1 << 29); /* host device: no effect on the plan */
    /* Pressure: the engine's own 64-token re-plan reads it (read_now). */
    say("available=1M\npressure=1\n");
    assert_true(ebb_stream_replan(s, 3000000000ull, 64, 1000000000ull, true, &chg));
    assert_int_equal(chg.to, 1);
    assert_non_null(strstr(chg.reason, "pressure"));
    assert_int_equal(ebb_stream_commit(s, &chg, &d), EBB_OK);
    run_step(s);
    struct ebb_stream_report r;
    ebb_stream_report(s, &r);
    assert_int_equal(r.n_resident, 1);
    assert_int_equal(r.n_layer, N_LAYER);
    assert_int_equal(r.bytes_per_token, 7 * LAYER);
    assert_int_equal(r.n_shrink, 2);
    assert_int_equal(r.n_events, 2);
    assert_int_equal(r.events[0].to, 2);
    assert_int_equal(r.events[1].t_ns, 3000000000ull - 1000);
    assert_true(r.pressure);
    assert_int_equal(r.io.hits + r.io.misses, 3 * 6 + 7);
    char text[4096];
    size_t n = ebb_stream_report_prometheus(&r, text, sizeof(text));
    assert_true(n < sizeof(text));
    assert_int_equal(strlen(text), n);
    assert_non_null(strstr(text, "\nebb_stream_layers_resident 1\n"));
    assert_non_null(strstr(text, "\nebb_stream_memory_pressure 1\n"));
    assert_non_null(strstr(text, "ebb_stream_plan_changes_total{direction=\"shrink\"} 2\n"));
    assert_non_null(strstr(text, "# TYPE ebb_stream_prefetch_misses_total counter\n"));
    /* The JSON object parses and carries the same facts. */
    char js[4096];
    size_t jn = ebb_stream_report_json(&r, js, sizeof(js));
    assert_true(jn < sizeof(js));
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    if (!j)
        fail_msg("bad JSON (%s): %s", je.text, js);
    assert_int_equal(json_integer_value(json_object_get(j, "layers_resident")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "layers_total")), N_LAYER);
    assert_int_equal(json_integer_value(json_object_get(j, "slots")), 3);
    assert_string_equal(json_string_value(json_object_get(j, "mode")), "context");
    assert_string_equal(json_string_value(json_object_get(j, "cache")), "cached");
    assert_true(json_is_true(json_object_get(j, "pressure")));
    assert_int_equal(json_integer_value(json_object_get(j, "bytes_per_token")), 7 * LAYER);
    json_t *ev = json_object_get(j, "plan_changes");
    assert_int_equal(json_array_size(ev), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ev, 1), "to")), 1);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_array_get(ev, 1), "reason")), "pressure"));
    json_decref(j);
    char small[32];
    assert_int_equal(ebb_stream_report_prometheus(&r, small, sizeof(small)), n);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    ebb_stream_free(s);
    for (int i = 0; i < 3; i++)
        free(slots[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(facade, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
