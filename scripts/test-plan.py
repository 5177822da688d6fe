#!/usr/bin/env python3
"""The job queue of `scripts/dev test`: which meson tests run together, in which order.

scripts/dev runs the queue on two workers (the 2 cores of the CI machine), each taking the next
job as soon as it is free, so neither core idles while the other has work left (two fixed lanes
left one core idle for minutes at the end of each stage). A job is one `meson test` run; this
script prints one line per job:

    DIR LOGBASE ARG...        meson test -C DIR --logbase LOGBASE ARG...

Every test of the build directories is in exactly one job (new tests land in their suite's
"rest" job; none is missed). The order is longest first (LPT), with the estimates below in
seconds of CPU on the CI machine (measured at 2026-11-28; a test missing here counts 2 s); a
wrong estimate costs balance, never a test. Tests that share a generated file stay in one job,
in meson's order: a family's tests (model-FAMILY-tiny*) rewrite the same GGUF.

Usage: test-plan.py [--slow] LIST-DIR DIR[:SUITE,...] [DIR[:SUITE,...]...]
The tests are those of LIST-DIR (a configured build; the others are built from the same
meson.build). Jobs for each DIR (build-test, build-asan) in turn, of the SUITEs named (all
where none is), the 'slow' suite only with --slow; build-asan's with the estimates under
"asan:".
"""
import json
import re
import subprocess
import sys

# CPU seconds per test on 2 cores (one worker's core), by name or SUITE/NAME where a name is in
# two suites; "asan:" for build-asan. kernels, model and the Gemma 3 model tests scaled on
# 2026-11-29 by the CPU they saved here (/usr/bin/time user, before -> after: test-kernels cold
# 523 -> 450, model 70.2 -> 61.4, model-gemma3-long-cl 139.8 -> 121.3, model-gemma3-cl-q8 36.4
# -> 34.7 warm; model-gemma3 and model-gemma3-cl by model's and model-gemma3-cl-q8's ratios;
# integration 351 -> 308 by its two long-prefill tests' 59.9 -> 16.8; +30 on 2026-11-29 for
# test_multimodel's budget test with streamed layers, of 65 s user for both budget tests; +25
# for test_edge_chunked.py (its own server, 32 s user with the start)), and cli/cgroup measured
# whole (37 s user: the ebb runs in groups, and the 155 MiB one); cgroup-load measured whole
# on 2026-11-29 (14 s user: two daemons in groups under streaming requests). kernels 390 -> 140 on
# 2026-11-29 for PoCL's -cl-opt-disable (test-kernels cold 511 -> 159 s user here), and
# asan:kernels 45 -> 75 for its unoptimized kernels' runs (warm 20 -> 50 s user here).
# integration 310 -> 330 for test_data_parallel.py (18.7 s user alone here, 2026-11-29).
# 2026-11-29, by the CPU they saved here (/usr/bin/time user+sys, before -> after): cli/spec
# 124.6 -> 96.4 (110 -> 85); test-model's prefill_vs_decode without the head on its first 69
# steps, Gemma 3 on ref 39.3 -> 31.9 and on OpenCL 10.6 -> 7.5 (model-gemma3 136 -> 130,
# model-gemma3-cl 71 -> 68) and on the CPU device 6.3 -> 3.3 (model-gemma3-cpu 25 -> 22);
# model-gemma3-long-cl without the two checks model-gemma3-cl makes 121.3 -> 111.3 with both
# changes (95 -> 87); the families' ref runs under ASan+UBSan, qwen2-tiny 37.0 -> 19.9 and
# qwen3moe-tiny 50.4 -> 35.7 (the dense families' estimates scaled by the first ratio, the MoE
# ones by the second), and again for their 8 greedy steps there (qwen2-tiny 19.9 -> 13.0,
# qwen3moe-tiny 35.7 -> 16.0). The fuzz targets share their objects
# (scripts/fuzz.sh): the four built cold and run 1 s each 59.0 -> 38.6 s here; fuzz-request,
# first in the queue, still compiles the shared ones (Jinja's 10.0 s, the vocabulary's 6.5,
# base's 0.8), the others only their own file: fuzz-jinja 32 -> 22, fuzz-tokenize and
# fuzz-output 32 -> 25.
# integration-catalogue (test_catalogue_follow.py): 5.2 s user + 0.4 sys with its daemons,
# 2026-11-29, counted 10.
EST = {
    "kernels": 140, "integration": 330, "cli/cgroup": 40, "cgroup-load": 20, "integration-b": 150, "integration-catalogue": 10, "model-gemma3": 130, "stream-1b": 100, "cli/spec": 85,
    "model-gemma3-long-cl": 87, "model-long-gemma3-f16-cl-b512": 96, "perplexity": 85,
    "model-gemma3-cl": 68, "model-gemma3-cl-q8": 71, "model-cl-q8": 73,
    "model-expert-cache-cl": 105, "model-long-smollm2-f16-cl-b512": 68,
    "model-long-smollm2-f16-cl": 64, "model-long-gemma3-q8-cl-b512": 96,
    "model-long-smollm2-q8-cl-b512": 70, "perplexity-kvq8-cl": 20,
    "perplexity-gemma3-kvq8-cl": 20, "model": 52, "model-qwen3moe-tiny-cl-group-mms": 59,
    "qin": 49, "fuzz-request": 44, "model-batch": 41, "run": 40, "fuzz-jinja": 22,
    "fuzz-output": 25, "fuzz-tokenize": 25, "model-cl": 32, "cli/stream": 26,
    "model-batch-qwen3-q8": 24, "model-stream": 24, "model-moe-long-cl": 12, "model-qwen2-tiny-cl": 19,
    "perplexity-gemma3-cl": 20, "daemon-notify": 19, "stream-pressure": 14, "alloc-walk": 13,
    "model-hybrid": 12, "model-qwen3moe-tiny-cl-q8": 12, "daemon-sighup-model": 11,
    "model-qwen3moe-tiny-q8": 10, "model-qwen3moe-tiny-cl-group": 10, "model-batch-qwen3": 10,
    "bench-reps": 10, "stream-model": 9, "model-qwen2-tiny": 8, "model-phi3-tiny": 8,
    "model-qwen3-tiny": 6, "model-qwen3-tiny-cl": 7, "model-qwen3-tiny-cl-fold": 60, "model-llama3.1-tiny": 6,
    "model-llama3.1-tiny-cl": 5, "model-qwen3moe-tiny-cl": 7, "layers": 5,
    "model-qwen3moe-tiny-cl-xhost": 3,
    "model-mistral-window-cl": 5, "bench-batch": 4, "cpu-repack": 3, "nginx": 22, "cli/pull": 40,
    # The CPU device (2026-11-29, /usr/bin/time user on 2 loaded cores).
    "model-cpu": 21, "model-gemma3-cpu": 22, "perplexity-cpu": 24, "perplexity-gemma3-cpu": 45,
    "device-auto": 4, "model-batch-cpu": 64,
    # The layer split on two PoCL devices (2026-11-29, about 130 s user on 2 loaded cores).
    "cli/split": 135,
    # Under ASan+UBSan (the CI run of 2026-11-28, seconds on one core; model-cl's and the
    # families' as cut down for that pass).
    "asan:kernels": 75, "asan:model-cl": 40, "asan:model-cl-q8": 60, "asan:model-batch": 40,
    "asan:model-qwen2-tiny": 16,
    "asan:model-qwen3-tiny": 15, "asan:model-llama3.1-tiny": 11, "asan:model-qwen3moe-tiny": 8,
    "asan:model-qwen3moe-tiny-q8": 5, "asan:model-phi3-tiny": 3, "asan:model-phi3.5-tiny": 2,
    "asan:alloc-walk": 10, "asan:stream-model": 8,
    # The CPU device's batch test is in the kernels suite, so the ASan pass runs it too: 213 s
    # there in the fresh-clone run of 2026-11-29 (04:54), where, missing here, it was counted 2 s
    # and ran last, alone on one core for 3 minutes; 110 s of it the mixed batch, the rest 32
    # greedy steps, now 8 under ASan (tests/kernels/meson.build).
    "asan:model-batch-cpu": 150,
    # The int8 stand-in's perplexity and the random-weight batch tests were first counted from
    # the fresh-clone run of 2026-12-01 (11:39, commit 845626b; missing here, each had been
    # counted 2 s and the kernels suite's small-test job held them all); their figures now are
    # the later ones below. Before them, 2026-12-02: perplexity-int8-cl on 2 windows, not 4; under
    # ASan+UBSan the random-weight batch tests take 8 greedy steps, those on the int8 tiles 3
    # (tests/kernels/meson.build): their seconds in the CI run of 2026-12-02 (08:51, commit
    # dcbe936; the figures above were 2 to 3 times short of it) scaled by the wall time each
    # saved here, warm and alone (before -> after): qwen3 3.06 -> 2.15 s, q8 7.44 -> 5.91, q5_k_m
    # 18.0 -> 11.3, q6_k 16.6 -> 9.9, mmqs 89.3 -> 84.1, ksplit-q4_k_m-keep 44.3 -> 41.7 (the
    # other two ksplit tests by keep's ratio).
    "asan:model-batch-qwen3": 3, "asan:model-batch-qwen3-q8": 12,
    # 2026-12-02 (later): the K-quant batch tests on qwen3-tiny-k32 (a 32000-row output head, not
    # 151936) and matmul_mms's 8,1,1,1 tile for the int8 ones, perplexity-int8-cl on that tile:
    # seconds here alone, the plain build on a cold kernel cache, the ASan+UBSan one warm (as in
    # CI), by 1.1 for the loaded CI machine; perplexity-int8-cl with matmul_mmql's 16,1,1,1 tile
    # too (76 s alone on a fresh cache; 148 and 163 s in the two CI runs before it).
    "perplexity-int8-cl": 90, "model-batch-qwen3-mmqs": 95, "model-batch-qwen3-ksplit-q4_k_m": 73,
    "model-batch-qwen3-ksplit-q5_k_m": 52, "model-batch-qwen3-ksplit-q4_k_m-keep": 11,
    "model-batch-qwen3-q5_k_m": 11, "model-batch-qwen3-q6_k": 8,
    "asan:model-batch-qwen3-q5_k_m": 5, "asan:model-batch-qwen3-q6_k": 5,
    "asan:model-batch-qwen3-mmqs": 25, "asan:model-batch-qwen3-ksplit-q4_k_m": 9,
    "asan:model-batch-qwen3-ksplit-q5_k_m": 9, "asan:model-batch-qwen3-ksplit-q4_k_m-keep": 11,
}
DEFAULT = 2
BIG = 20  # tests estimated at this or more get a job of their own


def estimate(prefix, suite, name):
    return EST.get(prefix + suite + "/" + name, EST.get(prefix + name, DEFAULT))


def tests_of(build):
    out = subprocess.run(["meson", "introspect", build, "--tests"], check=True,
                         capture_output=True, text=True).stdout
    for t in json.loads(out):
        suites = [s.split(":", 1)[1] for s in t["suite"]]
        yield t["name"], suites


def jobs_of(tests, only, slow, prefix):
    groups = {}  # group key -> [(suite, name)]
    for name, suites in tests:
        if ("slow" in suites and not slow) or (only and not set(only) & set(suites)):
            continue
        suite = [s for s in suites if not only or s in only][0]
        fam = re.match(r"model-(.*-tiny)", name)
        est = estimate(prefix, suite, name)
        key = ("family", fam.group(1)) if fam else (suite, name if est >= BIG else "")
        groups.setdefault(key, []).append((suite, name))
    jobs = []
    for tests in groups.values():
        est = sum(estimate(prefix, s, n) for s, n in tests)
        suites = sorted({s for s, _ in tests})
        jobs.append((est, [a for s in suites for a in ("--suite", s)] + [n for _, n in tests]))
    jobs.sort(key=lambda j: -j[0])
    return jobs


def main():
    args = sys.argv[1:]
    slow = "--slow" in args
    dirs = [a for a in args if a != "--slow"]
    tests = list(tests_of(dirs[0]))
    for spec in dirs[1:]:
        build, _, only = spec.partition(":")
        asan = build.endswith("asan")
        only = only.split(",") if only else []
        for n, (est, margs) in enumerate(jobs_of(tests, only, slow, "asan:" if asan else "")):
            print(build, "%s-%02d" % ("asan" if asan else "tests", n), *margs)


if __name__ == "__main__":
    main()
