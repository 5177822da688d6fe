#!/usr/bin/env python3
"""A family's random-weight model against llama.cpp's recorded outputs.

Regenerates the GGUF the committed data (tests/data/generation/NAME.json, written by
scripts/ref/family-expect.py) was recorded on with ebb-gen-model and the vocabulary the data
names, checks its sha256 against the recorded one (the generator must stay byte-for-byte
deterministic, or the data no longer describes the file), then runs test-model on it with all
the data's prompts (EBB_FAMILY_PROMPTS=N: the first N). The vocabularies come from scripts/fetch-vocabs.sh ($EBB_VOCABS_DIR, default
~/.cache/ebb/vocabs); as for the vocabs test, their absence is a failure. EBB_TEST_DEVICE
passes through (ref by default).

Usage: test-family.py EBB-GEN-MODEL TEST-MODEL DATA.json WORKDIR
"""
import hashlib
import json
import os
import subprocess
import sys


def main():
    gen_model, test_model, data, work = sys.argv[1:5]
    with open(data) as f:
        d = json.load(f)
    g = d["gen"]
    vocabs = os.environ.get("EBB_VOCABS_DIR") or os.path.expanduser("~/.cache/ebb/vocabs")
    vocab = os.path.join(vocabs, g["tokenizer"])
    if not os.path.exists(vocab):
        print(f"missing {vocab}: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR",
              file=sys.stderr)
        return 1
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, d["model"])
    subprocess.run([gen_model, "--shape", g["shape"], "--tokenizer-from", vocab, "--type",
                    g["type"], "--seed", str(g["seed"]), "-o", path], check=True)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != g["sha256"]:
        print(f"{path}: sha256 {sha}, the data was recorded on {g['sha256']}: ebb-gen-model's "
              "output changed; regenerate the data with scripts/ref/family-expect.py",
              file=sys.stderr)
        return 1
    env = dict(os.environ, EBB_MODELS_DIR=work,
               EBB_TEST_PROMPTS=os.environ.get("EBB_FAMILY_PROMPTS", "all"),
               EBB_TEST_GEN=os.path.basename(data)[:-len(".json")])
    return subprocess.run([test_model], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
