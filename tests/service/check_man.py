#!/usr/bin/env python3
"""docs/ebb.1 documents every flag that `ebb serve --help` and `ebb bench --help` list and every
command of `ebb --help`, and man renders it without warnings.

usage: check_man.py EBB_BINARY PATH/TO/ebb.1
"""
import os
import re
import shutil
import subprocess
import sys


def main():
    ebb, page = sys.argv[1], sys.argv[2]
    src = open(page).read()
    text = src.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
    serve = subprocess.run([ebb, "serve", "--help"], capture_output=True, text=True, check=True)
    flags = sorted(set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", serve.stdout, re.M)))
    missing = [f for f in flags if f not in text]
    # ebb bench's flags, in their own section
    bench = subprocess.run([ebb, "bench", "--help"], capture_output=True, text=True, check=True)
    bflags = sorted(set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", bench.stdout, re.M)))
    bsec = text[text.find(".SH BENCH OPTIONS"):text.find(".SH SIGNALS")]
    missing += [f"bench {f}" for f in bflags if f not in bsec]
    top = subprocess.run([ebb, "--help"], capture_output=True, text=True, check=True)
    cmds = re.findall(r"^  ([a-z]+)\s{2,}", top.stdout, re.M)
    missing += [c for c in cmds if not re.search(r"\b%s\b" % c, text)]
    print(f"{len(flags)} serve flags, {len(bflags)} bench flags, {len(cmds)} commands; "
          f"missing from {page}: {missing}")
    assert flags and bflags and cmds and not missing
    if shutil.which("man"):
        env = dict(os.environ, MANWIDTH="100", LC_ALL="C.UTF-8")
        r = subprocess.run(["man", "--warnings", "-l", "-Tutf8", page], capture_output=True,
                           text=True, env=env)
        warn = [l for l in r.stderr.splitlines() if l.strip()]
        print(f"man -l: rc={r.returncode}, {len(r.stdout.splitlines())} lines, warnings {warn}")
        assert r.returncode == 0 and not warn and "SIGHUP" in r.stdout
    print("ok: the man page covers ebb --help, serve --help and bench --help")


if __name__ == "__main__":
    main()
