#!/usr/bin/env python3
"""What a new user meets first (issue 27's rough edges) and the trained context (issue 28):

- `ebb serve -m missing` exits 1 naming the path and the .gguf files of the models directory;
- serve's --help names every endpoint and says what -m is; --temp and --temperature are both
  accepted by serve and run; --ctx's help says the default is capped at 4096;
- `ebb run 2>&1 | ...`: the closing speed line starts a line of its own; `ebb run --device all`
  (or a device list) with `--split none` (data parallel) is refused with a message naming `ebb
  serve`;
- README quotes no figures but links docs/PERFORMANCE.md's dated headline table, and shows how
  to fetch Gemma 3;
- a context past the model's trained one (tests/data/model/tiny-llama.gguf: 64 tokens) is
  capped at it with a warning in run, serve and `ebb info`, and kept with --ctx-over-trained
  (ctx_over_trained); through the server a prompt longer than the capped context gets a 400
  context_length_exceeded, and the start-up log says which context was chosen and why.

usage: test-edges.py EBB_BINARY TINY_LLAMA_GGUF
All on the reference device with a 64-token model: a few seconds.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

fails = 0


def check(cond, what):
    global fails
    print(("ok  " if cond else "FAIL ") + what)
    if not cond:
        fails += 1


def env_of(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EBB_")}
    env["EBB_CONFIG"] = "/dev/null"
    env.pop("NOTIFY_SOCKET", None)
    env.update(extra)
    return env


def run(ebb, args, **extra):
    return subprocess.run([ebb] + args, env=env_of(**extra), capture_output=True, text=True,
                          timeout=120)


def missing_model(ebb, tmp):
    mdir = os.path.join(tmp, "models")
    os.makedirs(mdir)
    for name in ("b-model.gguf", "a-model.gguf", "notes.txt"):
        open(os.path.join(mdir, name), "w").close()
    r = run(ebb, ["serve", "-m", "missing", "--port", "0"], EBB_MODELS_DIR=mdir)
    print(r.stderr.strip())
    check(r.returncode == 1, f"serve -m missing exits 1 (got {r.returncode})")
    check(os.path.join(mdir, "missing") in r.stderr and "No such file" in r.stderr,
          "serve -m missing names the path and the reason")
    check(f"models in {mdir}: a-model.gguf, b-model.gguf" in r.stderr,
          "serve -m missing lists the .gguf files of the models directory, sorted")
    check("listening" not in r.stdout, "serve -m missing does not listen first")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    r = run(ebb, ["serve", "-m", "x.gguf"], EBB_MODELS_DIR=empty)
    check(r.returncode == 1 and f"no .gguf files in {empty}" in r.stderr,
          f"an empty models directory is named as such: {r.stderr.strip()!r}")


def help_and_flags(ebb, tiny):
    h = run(ebb, ["serve", "--help"]).stdout
    first = h.split("\n\n")[1]
    for ep in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
               "/v1/messages", "/health", "/metrics", "/tokenize", "/detokenize"):
        check(ep in first, f"serve --help's first paragraph names {ep}")
    check("same as --model" not in h, "serve --help says what -m is")
    check("--temp T is --temperature T" in h, "serve --help documents --temp")
    ctx = [l for l in h.splitlines() if l.strip().startswith("--ctx ")]
    check(ctx and "4096" in ctx[0], f"serve --help's --ctx names the 4096 cap: {ctx}")
    check("--ctx-over-trained" in h, "serve --help documents --ctx-over-trained")
    for flag in (["--temp", "0.3"], ["--temp=0.3"], ["--temperature", "0.3"]):
        r = run(ebb, ["serve", *flag, "--check-config"])
        line = [l for l in r.stdout.splitlines() if l.startswith("temperature")]
        check(r.returncode == 0 and line and "0.3" in line[0] and "flag" in line[0],
              f"serve {' '.join(flag)}: {line}")
    h = run(ebb, ["run", "--help"]).stdout
    for want in ("--temp T, --temperature T", "--ctx-over-trained", "capped at 4096"):
        check(want in h, f"run --help has '{want}'")
    for flag in ("--temp", "--temperature"):
        r = run(ebb, ["run", "-m", tiny, "-p", "hello", "-n", "3", flag, "0", "--json",
                      "--device", "ref"])
        ok = r.returncode == 0 and json.loads(r.stdout)["sampling"]["temperature"] == {
            "value": 0.0, "source": "flag"}
        check(ok, f"run {flag} 0 sets the temperature ({r.returncode}, {r.stderr[-100:]!r})")


def speed_line(ebb, tiny):
    """Both streams into one pipe, as `ebb run ... 2>&1 | less` does."""
    p = subprocess.run(f"'{ebb}' run -m '{tiny}' -p hello -n 6 --temp 0 --device ref 2>&1 | cat",
                       shell=True, env=env_of(), capture_output=True, text=True, timeout=120)
    lines = p.stdout.splitlines()
    check(any(re.match(r"^ebb run: llama on ", l) for l in lines),
          f"the speed line starts a line of its own: {lines[-3:]}")


def device_list(ebb, tiny):
    """Data parallel over several devices is for serve only: run --split none says so instead
    of looking for a device named 'all' (no OpenCL needed: the spec is refused before any
    platform is asked). A list alone is a layer split (tests/cli/test-split.py)."""
    for spec in ("all", "cl:0:0,cl:0:1"):
        r = run(ebb, ["run", "-m", tiny, "-p", "hello", "-n", "2", "--device", spec, "--split",
                      "none"])
        check(r.returncode != 0 and "'ebb serve'" in r.stderr and spec in r.stderr,
              f"run --device {spec} --split none is refused, naming serve ({r.returncode}, "
              f"{r.stderr[-160:]!r})")


LONG = " ".join(["word"] * 20)  # 141 tokens of tiny-llama's vocabulary


def trained_ctx(ebb, tiny):
    r = run(ebb, ["run", "-m", tiny, "-p", LONG, "-n", "2", "--ctx", "256", "--device", "ref"])
    check(r.returncode == 1 and "capped at 64" in r.stderr and "context holds 64" in r.stderr,
          f"run --ctx 256 on a 64-token model: capped with a warning, the prompt refused "
          f"({r.returncode}, {r.stderr[-160:]!r})")
    for how, args, extra in (("--ctx-over-trained", ["--ctx-over-trained"], {}),
                             ("EBB_CTX_OVER_TRAINED", [], {"EBB_CTX_OVER_TRAINED": "true"})):
        r = run(ebb, ["run", "-m", tiny, "-p", LONG, "-n", "2", "--ctx", "256", "--device", "ref",
                      "--json", *args], **extra)
        check(r.returncode == 0 and "exceeds the model's trained context 64" in r.stderr,
              f"{how} keeps 256 with a warning ({r.returncode}, {r.stderr[-160:]!r})")
    r = run(ebb, ["info", tiny], EBB_CTX="256")
    line = [l for l in r.stdout.splitlines() if l.startswith("context chosen:")]
    check(line and re.match(r"context chosen:\s+64 per slot \(asked 256, capped at the trained 64",
                            line[0]), f"ebb info shows the cap: {line}")
    r = run(ebb, ["info", "--json", tiny], EBB_CTX="256", EBB_CTX_OVER_TRAINED="1")
    c = json.loads(r.stdout)["context"]
    check(c["trained"] == 64 and c["chosen"] == 256 and c["over_trained"] and not c["capped"],
          f"ebb info --json with ctx_over_trained: {c}")
    r = run(ebb, ["info", "--json", tiny])
    c = json.loads(r.stdout)["context"]
    check(c["asked"] == 0 and c["chosen"] == 64, f"ebb info --json by default: {c}")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def serve(ebb, tiny, extra):
    """Starts ebb serve and waits until it logs the context it chose (the model is loaded);
    returns (proc, port, the stderr lines so far)."""
    p = subprocess.Popen([ebb, "serve", "-m", tiny, "--port", "0", "--device", "ref",
                          "--parallel", "1", "--ctx", "256", "--chat-template", "chatml", *extra], env=env_of(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = [], []
    for f, sink in ((p.stdout, out), (p.stderr, err)):
        threading.Thread(target=lambda f=f, sink=sink: sink.extend(iter(f.readline, "")),
                         daemon=True).start()
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and not any(
            "tokens per slot" in l for l in err):
        time.sleep(0.05)
    port = None
    for line in out:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
    return p, port, "".join(err)


def server(ebb, tiny):
    p, port, err = serve(ebb, tiny, [])
    try:
        print(err.strip())
        check(port is not None, "serve listens")
        check("capped at 64" in err, "serve warns that --ctx 256 is capped at the trained 64")
        check(re.search(r"context 64 tokens per slot, 1 slots \(asked 256, capped at the trained "
                        r"64", err) is not None, "serve logs the chosen context and why")
        st, body = post(port, "/v1/completions", {"prompt": LONG, "max_tokens": 2})
        check(st == 400 and body["error"]["code"] == "context_length_exceeded",
              f"a 141-token prompt in a 64-token context: {st} {body}")
        st, body = post(port, "/v1/completions", {"prompt": "hello", "max_tokens": 2})
        check(st == 200, f"a short prompt is served: {st}")
    finally:
        p.terminate()
        p.wait(30)
    p, port, err = serve(ebb, tiny, ["--ctx-over-trained", "true"])
    try:
        check("context 256 tokens per slot" in err and "exceeds the model's trained context 64"
              in err, "--ctx-over-trained true keeps 256, with a warning")
        st, body = post(port, "/v1/completions", {"prompt": LONG, "max_tokens": 2})
        check(st == 200, f"then the 141-token prompt is served: {st}")
    finally:
        p.terminate()
        p.wait(30)


def docs():
    """README quotes no figures and links to PERFORMANCE.md's dated headline table; it shows how
    to fetch Gemma 3, in a form scripts/fetch-models.sh accepts."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    readme = open(os.path.join(root, "README.md")).read()
    perf = open(os.path.join(root, "docs", "PERFORMANCE.md")).read()
    fetch = open(os.path.join(root, "scripts", "fetch-models.sh")).read()
    figures = re.findall(r"\b\d+(?:\.\d+)?x\b|\d[\d.]* tok/s|\d\.\d+-\d\.\d+", readme)
    check(not figures, f"README quotes no speed figures: {figures}")
    check("docs/PERFORMANCE.md#headline-figures" in readme, "README links the headline table")
    m = re.search(r"^## Headline figures\n\n\*\*(\d{4}-\d\d-\d\d), ([^,]+), commit ([0-9a-f]{7,})",
                  perf, re.M)
    check(m is not None, "PERFORMANCE.md's headline table names its date, card and commit")
    check(perf.find("\n## ") == perf.find("\n## Headline figures"),
          "the headline table is the first section of PERFORMANCE.md")
    check("fetch-models.sh gemma3" in readme and re.search(r"^# Usage: .*\[gemma3\]", fetch, re.M),
          "README shows how to fetch Gemma 3, as fetch-models.sh accepts it")


def main():
    ebb, tiny = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp()
    try:
        missing_model(ebb, tmp)
        help_and_flags(ebb, tiny)
        speed_line(ebb, tiny)
        device_list(ebb, tiny)
        trained_ctx(ebb, tiny)
        server(ebb, tiny)
        docs()
    finally:
        shutil.rmtree(tmp)
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
