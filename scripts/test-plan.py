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

# CPU seconds per test on 2 cores (one worker's core); "asan:" for build-asan.
EST = {
    "kernels": 430, "integration": 200, "model-gemma3": 130, "spec": 90, "stream-1b": 100,
    "model-gemma3-long-cl": 80, "model": 60, "model-long-smollm2-f16-cl": 64,
    "model-long-smollm2-f16-cl-b512": 50, "model-long-gemma3-f16-cl-b512": 70,
    "model-expert-cache-cl": 50, "perplexity": 50, "model-gemma3-cl": 50,
    "model-gemma3-cl-q8": 50, "model-cl-q8": 50, "model-batch": 40, "model-cl": 30,
    "qin": 40, "run": 30, "fuzz-request": 32, "fuzz-jinja": 32, "fuzz-output": 32,
    "fuzz-tokenize": 32, "stream": 20, "model-batch-qwen3-q8": 20, "model-stream": 20,
    "asan:kernels": 45, "asan:model-cl": 100, "asan:model-cl-q8": 120, "asan:model-batch": 30,
}
DEFAULT = 2
BIG = 20  # tests estimated at this or more get a job of their own


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
        est = EST.get(prefix + name, DEFAULT)
        key = ("family", fam.group(1)) if fam else (suite, name if est >= BIG else "")
        groups.setdefault(key, []).append((suite, name))
    jobs = []
    for tests in groups.values():
        est = sum(EST.get(prefix + n, DEFAULT) for _, n in tests)
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
