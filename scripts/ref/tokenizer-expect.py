#!/usr/bin/env python3
"""Records llama.cpp's token ids for the tokenizer corpus, for tests/unit/test-tokenizer.c.

For each model, loads only the vocabulary with llama-cpp-python (vocab_only=True) and writes
tests/data/tokenizer/expect-<name>.json with:
  - plain: ids of every corpus string with add_special=False, parse_special=False;
  - roundtrip: whether llama.cpp's detokenization of those ids gives back the string's bytes;
  - joined: ids of all corpus strings joined by single spaces (one long text);
  - byte_cases: ids of the corpus's invalid-UTF-8 byte strings (hex in corpus.json);
  - parse_special / add_special: a smaller set (indices into the corpus) tokenized with
    parse_special=True, and with add_special=True;
  - the model's BOS/EOS/EOT ids, add_bos/add_eos flags and end-of-generation ids.
It also writes expect-smollm2-pre.json: SmolLM2's vocabulary and merges tokenized with the other
supported pre-tokenizers (llama-bpe, qwen2, gpt-2, default), through metadata-only copies of the
model with tokenizer.ggml.pre replaced (written to a temporary directory).
This needs llama-cpp-python; the unit test only reads the files written here.

Usage: python3 scripts/ref/tokenizer-expect.py [MODELS_DIR]
"""
import ctypes
import json
import os
import sys
import tempfile

import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}


def tokenize(vocab, data, add_special, parse_special):
    cap = len(data) + 16
    while True:
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
        if n >= 0:
            return [buf[i] for i in range(n)]
        cap = -n


def detokenize(vocab, ids):
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 64 * len(ids)
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, False, False)
        if n >= 0:
            return buf.raw[:n]
        cap = -n


# Pre-tokenizers checked on SmolLM2's vocabulary and merges with tokenizer.ggml.pre replaced.
OTHER_PRE = ["llama-bpe", "qwen2", "gpt-2", "default"]


def copy_with_pre(src, dst, pre):
    """Writes a metadata-only copy of src with tokenizer.ggml.pre set to pre."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = pre if k == "tokenizer.ggml.pre" else f.contents()
        t = f.types[0]
        w.add_key_value(k, v, t, sub_type=f.types[1] if t == GGUFValueType.ARRAY else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load_vocab(path):
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        sys.exit("cannot load %s" % path)
    return model, llama_cpp.llama_model_get_vocab(model)


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))
    with open(os.path.join(DATA, "corpus.json"), encoding="utf-8") as f:
        doc = json.load(f)
    corpus = doc["strings"]
    byte_cases = [bytes.fromhex(h) for h in doc["byte_cases"]]
    # The smaller sets: everything that looks like special-token text, plus a spread of others.
    small = [i for i, s in enumerate(corpus) if "<" in s or "[" in s]
    small += [i for i in range(0, len(corpus), 7) if i not in small]
    small = sorted(set(small))

    llama_cpp.llama_backend_init()
    for name, fname in MODELS.items():
        path = os.path.join(models_dir, fname)
        model, vocab = load_vocab(path)
        plain, roundtrip = [], []
        for s in corpus:
            data = s.encode("utf-8")
            ids = tokenize(vocab, data, False, False)
            plain.append(ids)
            roundtrip.append(detokenize(vocab, ids) == data)
        ps = [tokenize(vocab, corpus[i].encode("utf-8"), False, True) for i in small]
        ad = [tokenize(vocab, corpus[i].encode("utf-8"), True, False) for i in small]
        bc = [tokenize(vocab, b, False, False) for b in byte_cases]
        joined = tokenize(vocab, " ".join(corpus).encode("utf-8"), False, False)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
        control = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_control(vocab, i)]
        out = {
            "model": fname,
            "llama_cpp_python_version": llama_cpp.__version__,
            "corpus_count": len(corpus),
            "n_vocab": n_vocab,
            "bos": llama_cpp.llama_vocab_bos(vocab),
            "eos": llama_cpp.llama_vocab_eos(vocab),
            "eot": llama_cpp.llama_vocab_eot(vocab),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "eog": eog,
            "n_control": len(control),
            "plain": plain,
            "roundtrip": roundtrip,
            "small_indices": small,
            "parse_special": ps,
            "add_special": ad,
            "byte_cases": bc,
            "joined": joined,
        }
        with open(os.path.join(DATA, "expect-%s.json" % name), "w", encoding="ascii") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
        llama_cpp.llama_model_free(model)
        print("%s: %d strings, %d small, roundtrip %d/%d, eog %s" % (
            name, len(corpus), len(small), sum(roundtrip), len(roundtrip), eog[:10]))

    # Other pre-tokenizers over SmolLM2's vocabulary.
    out = {"model": MODELS["smollm2"], "llama_cpp_python_version": llama_cpp.__version__,
           "pre": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in OTHER_PRE:
            path = os.path.join(tmp, "vocab-%s.gguf" % pre)
            copy_with_pre(os.path.join(models_dir, MODELS["smollm2"]), path, pre)
            model, vocab = load_vocab(path)
            out["pre"][pre] = {
                "plain": [tokenize(vocab, s.encode("utf-8"), False, False) for s in corpus],
                "byte_cases": [tokenize(vocab, b, False, False) for b in byte_cases],
            }
            llama_cpp.llama_model_free(model)
            print("smollm2 vocabulary with pre '%s' recorded" % pre)
    with open(os.path.join(DATA, "expect-smollm2-pre.json"), "w", encoding="ascii") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
