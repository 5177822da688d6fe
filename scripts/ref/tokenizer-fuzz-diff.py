#!/usr/bin/env python3
"""Differential check of ebb's tokenizers against llama.cpp on seeded random strings.

Random strings mix ASCII, whitespace, contractions, special-token texts and code points from all
planes; each is encoded by llama-cpp-python and by ebb (through `test-tokenizer --encode`) for
both models with flags plain, parse_special and add_special. Prints the match counts and the
first mismatches. Not part of the test suite (it needs llama-cpp-python).

Usage: python3 scripts/ref/tokenizer-fuzz-diff.py BUILD_DIR [SEED] [COUNT]
"""
import os
import random
import subprocess
import sys
import tempfile

import llama_cpp

MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
ASCII = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "\r", " ", " ", " ", "'", "'s",
                                                  "'T", "'ll"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<end_of_turn>", "<start_of_turn>", "<b>",
            "  ", "\n\n", "\t\t", "<|endoftext|>", "<unused3>", "[multimodal]", "<0x41>", "<table>"]


def random_string(rng):
    out = []
    for _ in range(rng.randint(0, 40)):
        r = rng.random()
        if r < 0.45:
            out.append(rng.choice(ASCII))
        elif r < 0.55:
            out.append(rng.choice(SPECIALS))
        else:
            hi = 0x3000 if r < 0.75 else 0x30000 if r < 0.9 else 0x110000
            cp = rng.randrange(hi)
            while 0xD800 <= cp < 0xE000:
                cp = rng.randrange(hi)
            out.append(chr(cp))
    return "".join(out)


def main():
    build = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    models_dir = os.environ.get("EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))
    rng = random.Random(seed)
    strings = [random_string(rng) for _ in range(count)]
    exe = os.path.join(build, "tests", "unit", "test-tokenizer")
    failed = 0
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        for s in strings:
            b = s.encode("utf-8")
            f.write(b"%d\n" % len(b) + b)
        f.flush()
        for m in MODELS:
            path = os.path.join(models_dir, m)
            ref = llama_cpp.Llama(path, vocab_only=True, verbose=False)
            for flags, name in [(0, "plain"), (2, "parse_special"), (1, "add_special")]:
                out = subprocess.run([exe, "--encode", path, f.name, str(flags)], check=True,
                                     capture_output=True, text=True).stdout.split("\n")
                bad = 0
                for i, s in enumerate(strings):
                    want = ref.tokenize(s.encode("utf-8"), add_bos=bool(flags & 1),
                                        special=bool(flags & 2))
                    got = [int(x) for x in out[i].split()]
                    if got != want:
                        bad += 1
                        if bad <= 3:
                            print("  mismatch %s %s: %r\n    llama.cpp %s\n    ebb       %s" % (
                                m, name, s, want[:24], got[:24]))
                print("%s %s: %d/%d match" % (m, name, count - bad, count))
                failed += bad
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
