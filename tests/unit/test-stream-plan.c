/* Residency planner: placement, modes, shrink on limit and pressure, growth with hold time,
 * hysteresis and the tokens/s check, with a fake clock and fake readings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "stream/stream-plan.h"

#define MiB (1024ull * 1024)
#define SEC 1000000000ull

static uint64_t uniform[16];

/* 16 layers of 100 MiB, 200 MiB fixed, 50 runtime, 200 staging, 64 KiB of KV per token. */
static struct ebb_stream_plan_cfg base_cfg(void)
{
    for (int i = 0; i < 16; i++)
        uniform[i] = 100 * MiB;
    struct ebb_stream_plan_cfg c = {
        .n_layer = 16,
        .layer_bytes = uniform,
        .fixed_bytes = 200 * MiB,
        .runtime_bytes = 50 * MiB,
        .staging_bytes = 200 * MiB,
        .kv_per_token = 64 * 1024,
        .n_ctx_want = 4096,
        .mode = EBB_STREAM_CONTEXT,
        .margin = 100 * MiB,
    };
    return c;
}

static void initial_counts(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {0};
    struct ebb_diag d;
    /* Budget 1 GiB: 200 + 50 + KV 256 (4096 x 64 KiB) + staging 200 = 706 leaves 318: 3 layers. */
    c.budget = 1024 * MiB;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_ctx, 4096);
    assert_int_equal(p.n_resident, 3);
    assert_int_equal(ebb_stream_plan_total(&p, 3), 1006 * MiB);
    /* Everything fits without staging: 506 + 1600 = 2106 MiB. */
    c.budget = 2106 * MiB;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 16);
    c.budget = 2105 * MiB; /* one byte short of full: 15 fit, with staging */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 13); /* 706 + 100 n <= 2105 -> 13 */
    /* Below the every-layer-streamed minimum. */
    c.budget = 700 * MiB;
    d.msg[0] = 0;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_ENOMEM);
    assert_non_null(strstr(d.msg, "every layer streamed"));
    uint64_t words[2];
    c.budget = 1024 * MiB;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    ebb_stream_plan_bitmap(&p, words, 2);
    assert_int_equal(words[0], 0x7);
    assert_int_equal(words[1], 0);
    assert_true(ebb_stream_plan_resident(&p, 2));
    assert_false(ebb_stream_plan_resident(&p, 3));
}

/* The three-way placement under a budget: the planner's resident count, then the last layers
 * of the rest on the host, never a resident one; and the host count chosen from rates. */
static void three_way(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {0};
    struct ebb_diag d;
    uint8_t k[16];
    c.budget = 1024 * MiB; /* 3 resident (initial_counts) */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(ebb_stream_plan_place(16, p.n_resident, 5, k), 5);
    for (int l = 0; l < 16; l++)
        assert_int_equal(k[l], l < 3    ? EBB_STREAM_PLACE_RESIDENT
                               : l < 11 ? EBB_STREAM_PLACE_STREAMED
                                        : EBB_STREAM_PLACE_HOST);
    /* More host layers than layers off the device: all of those, none resident taken. */
    assert_int_equal(ebb_stream_plan_place(16, p.n_resident, 40, k), 13);
    assert_int_equal(k[2], EBB_STREAM_PLACE_RESIDENT);
    assert_int_equal(k[3], EBB_STREAM_PLACE_HOST);
    /* A tighter budget moves the boundary; the host keeps the tail. */
    c.budget = 806 * MiB; /* 706 + 100: 1 resident */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 1);
    assert_int_equal(ebb_stream_plan_place(16, p.n_resident, 4, k), 4);
    assert_int_equal(k[0], EBB_STREAM_PLACE_RESIDENT);
    assert_int_equal(k[1], EBB_STREAM_PLACE_STREAMED);
    assert_int_equal(k[11], EBB_STREAM_PLACE_STREAMED);
    assert_int_equal(k[12], EBB_STREAM_PLACE_HOST);
    /* Everything resident: no host layer. */
    assert_int_equal(ebb_stream_plan_place(16, 16, 4, k), 0);
    assert_int_equal(k[15], EBB_STREAM_PLACE_RESIDENT);
    assert_int_equal(ebb_stream_plan_place(16, 0, 0, k), 0);
    assert_int_equal(k[15], EBB_STREAM_PLACE_STREAMED);

    /* Host count from rates (10 layers off the device, prefetch 2); unknown rates: none. */
    assert_int_equal(ebb_stream_plan_host_count(10, 2.0, 0, 2), 0);
    assert_int_equal(ebb_stream_plan_host_count(10, 0, 1.0, 2), 0);
    /* Host faster than the link: all but the prefetch depth, whose copies the host's part
     * hides (h = 8: 2 x 2 + 8 x 1 - 4 = 8 ms; h = 10: 10 ms). */
    assert_int_equal(ebb_stream_plan_host_count(10, 2.0, 1.0, 2), 8);
    /* Host 1.5x slower than the link: h host layers cost 3h and hide min(2, 10-h) copies of 2
     * ms: h = 2 gives 8 x 2 + 6 - 4 = 18 < 20, h = 1: 18 + 3 - 3 = 18 too (first kept). */
    assert_int_equal(ebb_stream_plan_host_count(10, 2.0, 3.0, 2), 1);
    /* Host 3x slower: h = 1 costs 18 + 6 - 4 = 20, no better than none. */
    assert_int_equal(ebb_stream_plan_host_count(10, 2.0, 6.0, 2), 0);
}

static void modes_and_probe(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    struct ebb_stream_planner p;
    struct ebb_diag d;
    /* No budget: the probe decides. 1300 available + 0 counted - 100 margin = 1200. */
    struct ebb_stream_inputs in = {.available_ok = true, .available = 1300 * MiB};
    c.mode = EBB_STREAM_CONTEXT; /* KV for 4096 = 256 MiB: 1200 - 706 = 494 -> 4 layers */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 4);
    assert_int_equal(p.n_ctx, 4096);
    c.mode = EBB_STREAM_SPEED; /* KV for 256 = 16 MiB: 1200 - 466 = 734 -> 7 layers, 34 left */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 7);
    assert_int_equal(p.n_ctx, 256 + 34 * 16); /* leftover 34 MiB = 544 more positions */
    c.mode = EBB_STREAM_BALANCED; /* KV for 2048 = 128 MiB: 1200 - 578 = 622 -> 6, 22 left */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 6);
    assert_int_equal(p.n_ctx, 2048 + 22 * 16);
    /* The budget caps the probe. */
    c.budget = 900 * MiB;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 3); /* 900 - 578 = 322 */
}

static void non_uniform_prefix(void **state)
{
    (void)state;
    uint64_t sizes[5] = {100 * MiB, 300 * MiB, 50 * MiB, 50 * MiB, 300 * MiB};
    struct ebb_stream_plan_cfg c = {.n_layer = 5,
                                    .layer_bytes = sizes,
                                    .fixed_bytes = 100 * MiB,
                                    .staging_bytes = 300 * MiB,
                                    .kv_per_token = 1024,
                                    .n_ctx_want = 1024,
                                    .margin = 1,
                                    .budget = 620 * MiB};
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {0};
    struct ebb_diag d;
    /* 401 MiB base + 100 fits; the 300 MiB layer 1 does not, and the smaller layers 2 and 3
     * behind it are not taken out of order (0, 2, 3 would be 601 MiB). */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 1);
    assert_int_equal(ebb_stream_plan_fit(&p, 900 * MiB), 3);
    assert_int_equal(ebb_stream_plan_fit(&p, 901 * MiB), 5); /* no staging when all resident */
}

/* Feeds a step; returns whether the plan changed. */
static bool step(struct ebb_stream_planner *p, struct ebb_stream_inputs *in, uint64_t t,
                 uint64_t avail, struct ebb_stream_change *chg)
{
    in->now_ns = t;
    in->available_ok = true;
    in->available = avail;
    in->counted_bytes = ebb_stream_plan_total(p, p->n_resident);
    memset(chg, 0, sizeof(*chg));
    return ebb_stream_planner_step(p, in, chg);
}

/* Generates n tokens at rate tps (busy time only). */
static void gen(struct ebb_stream_inputs *in, uint64_t n, double tps)
{
    in->tokens += n;
    in->busy_ns += (uint64_t)(n / tps * 1e9);
}

static void shrink_then_grow(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    c.budget = 2106 * MiB; /* all 16 fit the budget */
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {.available_ok = true, .available = 10000 * MiB};
    struct ebb_stream_change chg;
    struct ebb_diag d;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 16);
    gen(&in, 100, 10.0);
    assert_false(step(&p, &in, 1 * SEC, 10000 * MiB, &chg));
    /* Another program takes memory: only 300 MiB stay free beyond ours, minus 100 margin:
     * limit = 2106 + 300 - 100 = 2306 > 2106... still fits. Drop to -700: limit 1306. */
    assert_false(step(&p, &in, 2 * SEC, 300 * MiB, &chg));
    assert_true(step(&p, &in, 3 * SEC, 0, &chg));
    /* counted 2106 + 0 - 100 = 2006: 706 + 100 n <= 2006 -> 13 */
    assert_int_equal(chg.from, 16);
    assert_int_equal(chg.to, 13);
    assert_int_equal(p.n_resident, 13);
    assert_non_null(strstr(chg.reason, "shed 3 from the top"));
    gen(&in, 64, 6.0); /* slower with streaming */
    /* Memory comes back; no growth before the hold time (10 s) has passed. */
    assert_false(step(&p, &in, 4 * SEC, 5000 * MiB, &chg));
    assert_false(step(&p, &in, 10 * SEC, 5000 * MiB, &chg));
    /* A dip in between restarts the hold. */
    assert_false(step(&p, &in, 11 * SEC, 150 * MiB, &chg)); /* no room beyond hysteresis */
    assert_false(step(&p, &in, 12 * SEC, 5000 * MiB, &chg));
    assert_false(step(&p, &in, 21 * SEC, 5000 * MiB, &chg));
    assert_true(step(&p, &in, 22 * SEC, 5000 * MiB, &chg));
    assert_int_equal(chg.to, 16);
    assert_non_null(strstr(chg.reason, "grow by 3"));
    assert_true(p.trial);
    /* Not judged before grow_min_tokens. */
    gen(&in, 10, 9.0);
    assert_false(step(&p, &in, 23 * SEC, 5000 * MiB, &chg));
    assert_true(p.trial);
    gen(&in, 40, 9.0); /* 9 tok/s > 6 * 1.02: kept */
    assert_false(step(&p, &in, 24 * SEC, 5000 * MiB, &chg));
    assert_false(p.trial);
    assert_int_equal(p.n_resident, 16);
    assert_int_equal(p.n_changes, 2);
}

static void growth_undone(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {.available_ok = true, .available = 1300 * MiB};
    struct ebb_stream_change chg;
    struct ebb_diag d;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 4);
    gen(&in, 64, 5.0);
    /* 500 MiB more become free (beyond margin + hysteresis: 300 usable -> +3 layers). */
    assert_false(step(&p, &in, 1 * SEC, 500 * MiB, &chg));
    assert_true(step(&p, &in, 11 * SEC, 500 * MiB, &chg));
    assert_int_equal(chg.from, 4);
    assert_int_equal(chg.to, 7);
    /* Growing made it slower (the page cache it pushed out was worth more): undone. */
    gen(&in, 64, 4.0);
    assert_true(step(&p, &in, 12 * SEC, 200 * MiB, &chg));
    assert_int_equal(chg.to, 4);
    assert_non_null(strstr(chg.reason, "undone"));
    /* Room stays, but growth is held back for the backoff (60 s). */
    gen(&in, 64, 5.0);
    for (uint64_t t = 13; t < 72; t += 2)
        assert_false(step(&p, &in, t * SEC, 500 * MiB, &chg));
    assert_false(step(&p, &in, 73 * SEC, 500 * MiB, &chg)); /* the hold starts now */
    assert_true(step(&p, &in, 83 * SEC, 500 * MiB, &chg));
    assert_int_equal(chg.to, 7);
    /* No measurement before a growth (idle daemon): the growth is kept once judged. */
    struct ebb_stream_planner q;
    struct ebb_stream_inputs idle = {.available_ok = true, .available = 1300 * MiB};
    assert_int_equal(ebb_stream_planner_init(&q, &c, &idle, &d), EBB_OK);
    assert_false(step(&q, &idle, 1 * SEC, 500 * MiB, &chg));
    assert_true(step(&q, &idle, 11 * SEC, 500 * MiB, &chg));
    gen(&idle, 64, 1.0);
    assert_false(step(&q, &idle, 12 * SEC, 500 * MiB, &chg));
    assert_int_equal(q.n_resident, 7);
}

static void pressure_sheds(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    c.budget = 2106 * MiB;
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {0};
    struct ebb_stream_change chg;
    struct ebb_diag d;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    in.pressure = true;
    assert_true(step(&p, &in, 1 * SEC, 100000 * MiB, &chg));
    assert_int_equal(chg.to, 14); /* an eighth of 16 */
    assert_non_null(strstr(chg.reason, "pressure"));
    /* PSI's avg10 stays high for a while: no second shed within the gap, no growth. */
    assert_false(step(&p, &in, 2 * SEC, 100000 * MiB, &chg));
    assert_true(step(&p, &in, 6 * SEC, 100000 * MiB, &chg));
    assert_int_equal(chg.to, 12);
    in.pressure = false;
    /* Grows back only after the hold (from the first reading without pressure), to all 16. */
    assert_false(step(&p, &in, 7 * SEC, 100000 * MiB, &chg));
    assert_false(step(&p, &in, 16 * SEC, 100000 * MiB, &chg));
    assert_true(step(&p, &in, 17 * SEC, 100000 * MiB, &chg));
    assert_int_equal(chg.to, 16);
    /* A starved probe (under half the margin free) sheds at least an eighth per period. */
    assert_true(step(&p, &in, 18 * SEC, 10 * MiB, &chg));
    assert_int_equal(chg.to, 13); /* limit 2106 + 10 - 100 = 2016 */
    assert_true(step(&p, &in, 19 * SEC, 10 * MiB, &chg));
    assert_int_equal(chg.to, 11); /* the limit (1916) alone would keep 12 */
}

static void host_slots(void **state)
{
    (void)state;
    assert_int_equal(ebb_stream_plan_host_slots(32, 40 * MiB, 1279 * MiB, 3), 3);  /* ring */
    assert_int_equal(ebb_stream_plan_host_slots(32, 40 * MiB, 1280 * MiB, 3), 32); /* tier */
    assert_int_equal(ebb_stream_plan_host_slots(2, 40 * MiB, 9000 * MiB, 3), 3);
    assert_int_equal(ebb_stream_plan_host_slots(32, 0, 9000 * MiB, 3), 3);
}

static void parsing(void **state)
{
    (void)state;
    uint64_t v = 1;
    enum ebb_stream_mode m;
    assert_int_equal(ebb_stream_budget_parse("auto", &v), EBB_OK);
    assert_int_equal(v, 0);
    assert_int_equal(ebb_stream_budget_parse("256M", &v), EBB_OK);
    assert_int_equal(v, 256 * MiB);
    assert_int_equal(ebb_stream_budget_parse("8G", &v), EBB_OK);
    assert_int_equal(v, 8192 * MiB);
    assert_int_equal(ebb_stream_budget_parse("1.5GiB", &v), EBB_OK);
    assert_int_equal(v, 1536 * MiB);
    assert_int_equal(ebb_stream_budget_parse("4096", &v), EBB_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(ebb_stream_budget_parse("0", &v), EBB_EINVAL);
    assert_int_equal(ebb_stream_budget_parse("-1G", &v), EBB_EINVAL);
    assert_int_equal(ebb_stream_budget_parse("12Q", &v), EBB_EINVAL);
    assert_int_equal(ebb_stream_budget_parse("", &v), EBB_EINVAL);
    assert_int_equal(ebb_stream_mode_parse("balanced", &m), EBB_OK);
    assert_int_equal(m, EBB_STREAM_BALANCED);
    assert_string_equal(ebb_stream_mode_name(EBB_STREAM_SPEED), "speed");
    assert_int_equal(ebb_stream_mode_parse("fast", &m), EBB_EINVAL);
    struct ebb_stream_plan_cfg c = base_cfg();
    c.n_layer = 0;
    struct ebb_diag d;
    assert_int_equal(ebb_stream_plan_cfg_check(&c, &d), EBB_EINVAL);
    c = base_cfg();
    c.margin = 0;
    assert_int_equal(ebb_stream_plan_cfg_check(&c, &d), EBB_OK);
    assert_int_equal(c.margin, 90 * MiB); /* 5% of 1800 MiB beats the 64 MiB floor */
}

/* A budget lowered from outside (another model needs the memory) sheds at the next step; raised
 * again, it grows back at once: no hold time, no tok/s trial that could undo it. */
static void budget_lent_and_returned(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {.now_ns = SEC};
    struct ebb_stream_change chg;
    struct ebb_diag d;
    c.budget = 2106 * MiB; /* every layer */
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 16);
    ebb_stream_planner_set_budget(&p, 1006 * MiB);
    in.now_ns += SEC;
    assert_true(ebb_stream_planner_step(&p, &in, &chg));
    assert_int_equal(chg.to, 3);
    assert_non_null(strstr(chg.reason, "budget"));
    assert_false(ebb_stream_planner_step(&p, &in, &chg)); /* settled */
    ebb_stream_planner_set_budget(&p, 1506 * MiB);
    in.now_ns += 1000; /* far less than the hold time */
    assert_true(ebb_stream_planner_step(&p, &in, &chg));
    assert_int_equal(chg.to, 8);
    assert_non_null(strstr(chg.reason, "raised"));
    /* No trial pending: later steps with tokens flowing keep it. */
    in.tokens = 1000;
    in.busy_ns = 10 * SEC;
    in.now_ns += 20 * SEC;
    assert_false(ebb_stream_planner_step(&p, &in, &chg));
    assert_int_equal(p.n_resident, 8);
    /* Lifted (0: the probes alone, none here): every layer again. */
    ebb_stream_planner_set_budget(&p, 0);
    assert_true(ebb_stream_planner_step(&p, &in, &chg));
    assert_int_equal(chg.to, 16);
}

/* A memory limit lowered sheds at the next step; raised again (ebb_stream_planner_limit_raised),
 * it grows back at once, with no hold time, saying why; without the call the hold applies. */
static void limit_raised(void **state)
{
    (void)state;
    struct ebb_stream_plan_cfg c = base_cfg();
    struct ebb_stream_planner p;
    struct ebb_stream_inputs in = {.now_ns = SEC, .available_ok = true, .available = 4000 * MiB};
    struct ebb_stream_change chg;
    struct ebb_diag d;
    assert_int_equal(ebb_stream_planner_init(&p, &c, &in, &d), EBB_OK);
    assert_int_equal(p.n_resident, 16);
    in.available = 1100 * MiB; /* the limit lowered */
    in.now_ns += SEC;
    assert_true(ebb_stream_planner_step(&p, &in, &chg));
    uint32_t low = chg.to;
    assert_true(low < 16);
    in.available = 4000 * MiB; /* raised, no call: the hold time first */
    in.now_ns += 1000;
    assert_false(ebb_stream_planner_step(&p, &in, &chg));
    ebb_stream_planner_limit_raised(&p);
    in.now_ns += 1000; /* far less than the hold time */
    assert_true(ebb_stream_planner_step(&p, &in, &chg));
    assert_int_equal(chg.from, low);
    assert_int_equal(chg.to, 16);
    assert_non_null(strstr(chg.reason, "memory limit raised"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(initial_counts),     cmocka_unit_test(modes_and_probe),
        cmocka_unit_test(non_uniform_prefix), cmocka_unit_test(shrink_then_grow),
        cmocka_unit_test(growth_undone),      cmocka_unit_test(pressure_sheds),
        cmocka_unit_test(host_slots),         cmocka_unit_test(parsing),
        cmocka_unit_test(three_way),          cmocka_unit_test(budget_lent_and_returned),
        cmocka_unit_test(limit_raised),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
