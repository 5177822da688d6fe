/* Generation defaults (api/defaults/defaults.c): built-in values, the configuration over them, a
 * GGUF's general.sampling.* over both, keys that cannot be used, a client field over everything,
 * the value parser the config file uses, and the JSON of /v1/models and `ebb info --json`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/defaults/defaults.h"
#include "gguf-writer.h"

enum { T_U32 = 4, T_I32 = 5, T_F32 = 6, T_STR = 8, T_F64 = 12 };

/* A GGUF with no tensors whose metadata is kvs (n entries), opened from memory. The image must
 * outlive the handle, so it is returned in *img. */
static struct ebb_gguf *open_kvs(const struct wbuf *kvs, uint64_t n, struct wbuf *img)
{
    struct wbuf k = {0};
    w_kv(&k, "general.architecture", T_STR);
    w_str(&k, "llama");
    if (kvs)
        w_bytes(&k, kvs->p, kvs->n);
    *img = make(3, n + 1, &k, NULL, 0, 32, 0);
    free(k.p);
    struct ebb_gguf *g = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_gguf_open_mem(img->p, img->n, &g, &d))
        fail_msg("gguf: %s", d.msg);
    return g;
}

static void assert_close(double got, double want)
{
    if (fabs(got - want) > 1e-6)
        fail_msg("got %g, want %g", got, want);
}

static void test_builtin(void **state)
{
    (void)state;
    struct ebb_gen_defaults d;
    ebb_defaults_resolve(NULL, NULL, &d);
    assert_close(d.v.temperature, 0.8);
    assert_int_equal(d.v.top_k, 40);
    assert_close(d.v.top_p, 0.95);
    assert_close(d.v.min_p, 0.05);
    assert_close(d.v.repeat_penalty, 1);
    assert_int_equal(d.v.repeat_last_n, 64);
    assert_close(d.v.presence_penalty, 0);
    assert_close(d.v.frequency_penalty, 0);
    assert_int_equal(d.v.seed, EBB_SEED_RANDOM);
    assert_int_equal(d.v.n_logit_bias, 0);
    for (int f = 0; f < EBB_DEF_N_FIELDS; f++)
        assert_int_equal(d.src[f], EBB_DEF_SRC_BUILTIN);
    assert_false(d.model_sampling);
    assert_int_equal(d.n_notes, 0);
    /* A model without general.sampling.* changes nothing. */
    struct wbuf img;
    struct ebb_gguf *g = open_kvs(NULL, 0, &img);
    ebb_defaults_resolve(g, NULL, &d);
    assert_true(d.model_sampling);
    assert_close(d.v.temperature, 0.8);
    assert_int_equal(d.src[EBB_DEF_TEMPERATURE], EBB_DEF_SRC_BUILTIN);
    ebb_gguf_close(g);
    free(img.p);
}

static void test_config_over_builtin(void **state)
{
    (void)state;
    struct ebb_sampling_set cfg = {.mask = 0};
    ebb_defaults_builtin(&cfg.v);
    char why[128];
    assert_int_equal(ebb_defaults_parse(&cfg, EBB_DEF_TEMPERATURE, "0.3", why, sizeof(why)),
                     EBB_OK);
    assert_int_equal(ebb_defaults_parse(&cfg, EBB_DEF_TOP_K, "10", why, sizeof(why)), EBB_OK);
    assert_int_equal(ebb_defaults_parse(&cfg, EBB_DEF_PRESENCE_PENALTY, "-0.5", why, sizeof(why)),
                     EBB_OK);
    assert_int_equal(cfg.mask, EBB_DEF_BIT(EBB_DEF_TEMPERATURE) | EBB_DEF_BIT(EBB_DEF_TOP_K) |
                                   EBB_DEF_BIT(EBB_DEF_PRESENCE_PENALTY));
    struct ebb_gen_defaults d;
    ebb_defaults_resolve(NULL, &cfg, &d);
    assert_close(d.v.temperature, 0.3);
    assert_int_equal(d.v.top_k, 10);
    assert_close(d.v.presence_penalty, -0.5);
    assert_close(d.v.top_p, 0.95);
    assert_int_equal(d.src[EBB_DEF_TEMPERATURE], EBB_DEF_SRC_CONFIG);
    assert_int_equal(d.src[EBB_DEF_TOP_K], EBB_DEF_SRC_CONFIG);
    assert_int_equal(d.src[EBB_DEF_TOP_P], EBB_DEF_SRC_BUILTIN);
    /* A value the config holds but does not mark as set is not used. */
    cfg.v.top_p = 0.5f;
    ebb_defaults_resolve(NULL, &cfg, &d);
    assert_close(d.v.top_p, 0.95);
}

static void test_gguf_over_config(void **state)
{
    (void)state;
    struct wbuf kv = {0}, img;
    w_kv(&kv, "general.sampling.temp", T_F32);
    w_f32(&kv, 0.6f);
    w_kv(&kv, "general.sampling.top_k", T_U32);
    w_u32(&kv, 20);
    w_kv(&kv, "general.sampling.top_p", T_F64);
    w_f64(&kv, 0.9);
    w_kv(&kv, "general.sampling.min_p", T_F32);
    w_f32(&kv, 0.0f);
    w_kv(&kv, "general.sampling.penalty_repeat", T_F32);
    w_f32(&kv, 1.1f);
    w_kv(&kv, "general.sampling.penalty_last_n", T_I32);
    w_u32(&kv, (uint32_t)-1);
    struct ebb_gguf *g = open_kvs(&kv, 6, &img);
    free(kv.p);

    struct ebb_sampling_set cfg = {.mask = 0};
    ebb_defaults_builtin(&cfg.v);
    char why[128];
    assert_int_equal(ebb_defaults_parse(&cfg, EBB_DEF_TEMPERATURE, "0.2", why, sizeof(why)), 0);
    assert_int_equal(ebb_defaults_parse(&cfg, EBB_DEF_FREQUENCY_PENALTY, "0.25", why, sizeof(why)),
                     0);
    struct ebb_gen_defaults d;
    ebb_defaults_resolve(g, &cfg, &d);
    assert_close(d.v.temperature, 0.6);
    assert_int_equal(d.v.top_k, 20);
    assert_close(d.v.top_p, 0.9);
    assert_close(d.v.min_p, 0); /* a recommended 0 is a real choice */
    assert_close(d.v.repeat_penalty, 1.1);
    assert_int_equal(d.v.repeat_last_n, -1);
    assert_close(d.v.frequency_penalty, 0.25); /* no GGUF key: the config's */
    assert_close(d.v.presence_penalty, 0);
    for (int f = EBB_DEF_TEMPERATURE; f <= EBB_DEF_REPEAT_LAST_N; f++)
        assert_int_equal(d.src[f], EBB_DEF_SRC_GGUF);
    assert_int_equal(d.src[EBB_DEF_FREQUENCY_PENALTY], EBB_DEF_SRC_CONFIG);
    assert_int_equal(d.src[EBB_DEF_PRESENCE_PENALTY], EBB_DEF_SRC_BUILTIN);
    assert_int_equal(d.n_notes, 0);

    /* model_sampling = false: the resolver is given no GGUF, and the config wins again. */
    ebb_defaults_resolve(NULL, &cfg, &d);
    assert_close(d.v.temperature, 0.2);
    assert_int_equal(d.src[EBB_DEF_TEMPERATURE], EBB_DEF_SRC_CONFIG);
    assert_int_equal(d.v.top_k, 40);
    ebb_gguf_close(g);
    free(img.p);
}

static void test_client_wins(void **state)
{
    (void)state;
    struct wbuf kv = {0}, img;
    w_kv(&kv, "general.sampling.temp", T_F32);
    w_f32(&kv, 0.0f);
    w_kv(&kv, "general.sampling.top_k", T_I32);
    w_u32(&kv, 5);
    struct ebb_gguf *g = open_kvs(&kv, 2, &img);
    free(kv.p);
    struct ebb_gen_defaults d;
    ebb_defaults_resolve(g, NULL, &d);

    /* The client sent temperature 1 (OpenAI's own default) and top_p 1: both stay. */
    struct ebb_sampling s;
    ebb_sampling_defaults(&s);
    s.temperature = 1.0f;
    s.top_p = 1.0f;
    s.seed = 7;
    ebb_defaults_apply(&d, EBB_DEF_BIT(EBB_DEF_TEMPERATURE) | EBB_DEF_BIT(EBB_DEF_TOP_P), &s);
    assert_close(s.temperature, 1.0);
    assert_close(s.top_p, 1.0);
    assert_int_equal(s.top_k, 5); /* gguf */
    assert_close(s.min_p, 0.05);  /* builtin */
    assert_int_equal(s.seed, 7);  /* not a defaulted field: untouched */
    /* Nothing sent: everything from the defaults. */
    ebb_sampling_defaults(&s);
    ebb_defaults_apply(&d, 0, &s);
    assert_close(s.temperature, 0.0);
    assert_int_equal(s.top_k, 5);
    assert_close(s.top_p, 0.95);
    ebb_gguf_close(g);
    free(img.p);
}

static void test_gguf_values_not_used(void **state)
{
    (void)state;
    struct wbuf kv = {0}, img;
    w_kv(&kv, "general.sampling.temp", T_F32); /* outside 0..2 */
    w_f32(&kv, 5.0f);
    w_kv(&kv, "general.sampling.top_p", T_STR); /* text that is not a number */
    w_str(&kv, "high");
    w_kv(&kv, "general.sampling.min_p", T_STR); /* text that is: llama.cpp reads it too */
    w_str(&kv, "0.1");
    w_kv(&kv, "general.sampling.top_k", T_I32); /* <= 0 means off in llama.cpp as here */
    w_u32(&kv, (uint32_t)-1);
    w_kv(&kv, "general.sampling.penalty_last_n", T_F32); /* not a whole number */
    w_f32(&kv, 2.5f);
    w_kv(&kv, "general.sampling.mirostat", T_I32);
    w_u32(&kv, 2);
    w_kv(&kv, "general.sampling.xtc_probability", T_F32);
    w_f32(&kv, 0.5f);
    w_kv(&kv, "general.sampling.sequence", T_STR);
    w_str(&kv, "temperature;top_k\x01");
    struct ebb_gguf *g = open_kvs(&kv, 8, &img);
    free(kv.p);
    struct ebb_gen_defaults d;
    ebb_defaults_resolve(g, NULL, &d);
    assert_close(d.v.temperature, 0.8);
    assert_int_equal(d.src[EBB_DEF_TEMPERATURE], EBB_DEF_SRC_BUILTIN);
    assert_close(d.v.top_p, 0.95);
    assert_int_equal(d.src[EBB_DEF_TOP_P], EBB_DEF_SRC_BUILTIN);
    assert_close(d.v.min_p, 0.1);
    assert_int_equal(d.src[EBB_DEF_MIN_P], EBB_DEF_SRC_GGUF);
    assert_int_equal(d.v.top_k, 0);
    assert_int_equal(d.src[EBB_DEF_TOP_K], EBB_DEF_SRC_GGUF);
    assert_int_equal(d.v.repeat_last_n, 64);
    assert_int_equal(d.n_notes, 6);
    const char *want[] = {
        "general.sampling.temp = 5 is not a number between 0 and 2; not used",
        "general.sampling.top_p is not a number; not used",
        "general.sampling.penalty_last_n = 2.5 is not a whole number between -1 and 1048576; not "
        "used",
        "general.sampling.mirostat = 2: ebb has no mirostat sampler; not used",
        "general.sampling.xtc_probability = 0.5: ebb has no XTC sampler; not used",
        "general.sampling.sequence = 'temperature;top_k?': ebb samples in a fixed order",
    };
    for (size_t i = 0; i < 6; i++)
        if (strncmp(d.notes[i], want[i], strlen(want[i])))
            fail_msg("note %zu: '%s', want '%s'", i, d.notes[i], want[i]);
    ebb_gguf_close(g);
    free(img.p);
}

static void expect_parse_error(enum ebb_defaults_field f, const char *text, const char *want)
{
    struct ebb_sampling_set set = {.mask = 0};
    ebb_defaults_builtin(&set.v);
    char why[128] = "";
    assert_int_equal(ebb_defaults_parse(&set, f, text, why, sizeof(why)), EBB_EINVAL);
    assert_int_equal(set.mask, 0);
    if (strcmp(why, want))
        fail_msg("'%s': got '%s', want '%s'", text, why, want);
}

static void test_parse_and_format(void **state)
{
    (void)state;
    expect_parse_error(EBB_DEF_TEMPERATURE, "warm", "'warm' is not a number between 0 and 2");
    expect_parse_error(EBB_DEF_TEMPERATURE, "2.5", "'2.5' is not a number between 0 and 2");
    expect_parse_error(EBB_DEF_TEMPERATURE, "", "'' is not a number between 0 and 2");
    expect_parse_error(EBB_DEF_TEMPERATURE, "nan", "'nan' is not a number between 0 and 2");
    expect_parse_error(EBB_DEF_TEMPERATURE, "0.5x", "'0.5x' is not a number between 0 and 2");
    expect_parse_error(EBB_DEF_TEMPERATURE, " 0.5", "' 0.5' is not a number between 0 and 2");
    expect_parse_error(EBB_DEF_TOP_K, "4.5",
                       "'4.5' is not a whole number between 0 and 1073741824");
    expect_parse_error(EBB_DEF_TOP_K, "-1", "'-1' is not a whole number between 0 and 1073741824");
    expect_parse_error(EBB_DEF_REPEAT_LAST_N, "-2",
                       "'-2' is not a whole number between -1 and 1048576");
    expect_parse_error(EBB_DEF_REPEAT_PENALTY, "0", "'0' is not a number between 0.01 and 10");
    expect_parse_error(EBB_DEF_MIN_P, "1e999", "'1e999' is not a number between 0 and 1");

    struct ebb_sampling_set set = {.mask = 0};
    ebb_defaults_builtin(&set.v);
    char why[128], buf[32];
    assert_int_equal(ebb_defaults_parse(&set, EBB_DEF_REPEAT_LAST_N, "-1", why, sizeof(why)), 0);
    assert_int_equal(set.v.repeat_last_n, -1);
    assert_int_equal(ebb_defaults_parse(&set, EBB_DEF_TOP_P, "1e-1", why, sizeof(why)), 0);
    ebb_defaults_format(&set.v, EBB_DEF_TOP_P, buf, sizeof(buf));
    assert_string_equal(buf, "0.1");
    ebb_defaults_format(&set.v, EBB_DEF_TEMPERATURE, buf, sizeof(buf));
    assert_string_equal(buf, "0.8");
    ebb_defaults_format(&set.v, EBB_DEF_MIN_P, buf, sizeof(buf));
    assert_string_equal(buf, "0.05");
    ebb_defaults_format(&set.v, EBB_DEF_TOP_K, buf, sizeof(buf));
    assert_string_equal(buf, "40");
    ebb_defaults_format(&set.v, EBB_DEF_REPEAT_LAST_N, buf, sizeof(buf));
    assert_string_equal(buf, "-1");

    assert_int_equal(ebb_defaults_field_find("top-k"), EBB_DEF_TOP_K);
    assert_int_equal(ebb_defaults_field_find("frequency_penalty"), EBB_DEF_FREQUENCY_PENALTY);
    assert_int_equal(ebb_defaults_field_find("temp"), -1);
    assert_int_equal(ebb_defaults_field_find(""), -1);
    assert_string_equal(ebb_defaults_gguf_key(EBB_DEF_TEMPERATURE), "general.sampling.temp");
    assert_null(ebb_defaults_gguf_key(EBB_DEF_PRESENCE_PENALTY));
    assert_null(ebb_defaults_field_name(EBB_DEF_N_FIELDS));
}

static void test_json(void **state)
{
    (void)state;
    struct wbuf kv = {0}, img;
    w_kv(&kv, "general.sampling.top_k", T_U32);
    w_u32(&kv, 20);
    w_kv(&kv, "general.sampling.mirostat", T_U32);
    w_u32(&kv, 1);
    struct ebb_gguf *g = open_kvs(&kv, 2, &img);
    free(kv.p);
    struct ebb_sampling_set cfg = {.mask = 0};
    ebb_defaults_builtin(&cfg.v);
    char why[64];
    assert_int_equal(ebb_defaults_parse(&cfg, EBB_DEF_TEMPERATURE, "0.7", why, sizeof(why)), 0);
    struct ebb_gen_defaults d;
    ebb_defaults_resolve(g, &cfg, &d);
    json_t *j = ebb_defaults_json(&d);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    const char *want =
        "{\"generation_defaults\":{\"temperature\":{\"value\":0.7,\"source\":\"config\"},"
        "\"top_k\":{\"value\":20,\"source\":\"gguf\"},"
        "\"top_p\":{\"value\":0.95,\"source\":\"builtin\"},"
        "\"min_p\":{\"value\":0.05,\"source\":\"builtin\"},"
        "\"repeat_penalty\":{\"value\":1.0,\"source\":\"builtin\"},"
        "\"repeat_last_n\":{\"value\":64,\"source\":\"builtin\"},"
        "\"presence_penalty\":{\"value\":0.0,\"source\":\"builtin\"},"
        "\"frequency_penalty\":{\"value\":0.0,\"source\":\"builtin\"}},"
        "\"model_sampling\":true,"
        "\"model_sampling_notes\":[\"general.sampling.mirostat = 1: ebb has no mirostat sampler; "
        "not used\"]}";
    if (strcmp(s, want))
        fail_msg("got  %s\nwant %s", s, want);
    free(s);
    json_decref(j);
    ebb_gguf_close(g);
    free(img.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin),
        cmocka_unit_test(test_config_over_builtin),
        cmocka_unit_test(test_gguf_over_config),
        cmocka_unit_test(test_client_wins),
        cmocka_unit_test(test_gguf_values_not_used),
        cmocka_unit_test(test_parse_and_format),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
