#!/usr/bin/env python3
"""What `--device auto` picks (model.c, auto_device): the OpenCL engine when `ebb info --devices`
lists a GPU, else the native CPU device; `--device cl` opens OpenCL even on a CPU (PoCL) when
any device exists, `--device cpu` always the CPU device; EBB_AUTO_DEVICE overrides auto, and an
option only the OpenCL engine has (--memory-budget) keeps auto on it.

Usage: test-device-auto.py EBB TINY_GGUF
"""
import json
import os
import subprocess
import sys


def device(ebb, tiny, env, *args):
    p = subprocess.run([ebb, "run", "-m", tiny, "-p", "hello", "-n", "2", "--temp", "0", "--json",
                        *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"ebb run {' '.join(args)} failed: {p.stderr}")
    return json.loads(p.stdout)["device"], json.loads(p.stdout)["tokens"]


def main():
    ebb, tiny = sys.argv[1], sys.argv[2]
    env = dict(os.environ)
    env.pop("EBB_AUTO_DEVICE", None)
    p = subprocess.run([ebb, "info", "--devices", "--json"], capture_output=True, text=True,
                       env=env)
    devs = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip() else []
    gpu = any(d.get("type") == "gpu" for d in devs)
    got, _ = device(ebb, tiny, env)
    want = "opencl" if gpu else "cpu"
    assert got.startswith(want), (got, want, devs)
    print(f"auto: {got} ({len(devs)} OpenCL devices, GPU: {gpu})")
    cpu, cpu_ids = device(ebb, tiny, env, "--device", "cpu")
    assert cpu.startswith("cpu ("), cpu
    if devs:
        cl, _ = device(ebb, tiny, env, "--device", "cl")
        assert cl.startswith("opencl"), cl
        print(f"cl: {cl}")
        budget, _ = device(ebb, tiny, env, "--memory-budget", "1G")
        assert budget.startswith("opencl"), budget
    env["EBB_AUTO_DEVICE"] = "ref"
    ref, _ = device(ebb, tiny, env)
    assert ref.startswith("ref"), ref
    env["EBB_AUTO_DEVICE"] = "cpu"
    again, again_ids = device(ebb, tiny, env)
    assert again == cpu and again_ids == cpu_ids, (again, cpu)
    return 0


sys.exit(main())
