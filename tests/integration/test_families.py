"""`ebb serve` answers a chat with each model family (issue 13): a random-weight tiny model of
the family's shape, written by ebb-gen-model with the family's real vocabulary (llama.cpp's
vocab GGUFs, scripts/fetch-vocabs.sh; Gemma 3's from the real Gemma 3 270M file) and the
family's real chat template stored in the GGUF (llama.cpp's models/templates,
scripts/fetch-chat-templates.sh).

The families: llama (Llama 3.1's rope divisors), qwen2, qwen3, qwen3moe, gemma3, phi3, and
two variants: mistral (llama with a 16-position sliding window, crossed by the prompt) and
phi3.5 (longrope; the server's context of 512 runs the long factors).

For each it checks, through the official openai client:
- the prompt the daemon built is the template's rendering by jinja2 the way Hugging Face
  transformers renders it: usage.prompt_tokens equals the length of /tokenize of that rendering
  (a leading BOS text dropped where the tokenizer adds BOS, as docs/API.md says), and the greedy
  answer to the chat equals the greedy continuation of the rendering's ids sent as a raw
  /v1/completions prompt (on a random model, a different prompt shows in the text);
- each of the family's end tokens (the template's turn end and the GGUF's EOS), forced with
  logit_bias +100, ends the answer at once with finish_reason "stop", counted in
  completion_tokens and absent from the content; without the bias the answer runs to max_tokens.

Environment: EBB_GEN_MODEL (default: bench/ebb-gen-model next to EBB_BIN's daemon/),
EBB_VOCABS_DIR (default ~/.cache/ebb/vocabs), EBB_CHAT_TEMPLATES_DIR (default
~/.cache/ebb/chat-templates), EBB_MODELS_DIR for Gemma 3 270M. As for the vocabs test, missing
vocabularies or templates are a failure, not a skip.
"""
import os
import struct
import subprocess

import jinja2
import jinja2.sandbox
import pytest

from conftest import Server, models_dir

HOME_CACHE = os.path.expanduser("~/.cache/ebb")


def vocab_path(name):
    if name.startswith("models:"):
        return os.path.join(models_dir(), name[len("models:"):])
    d = os.environ.get("EBB_VOCABS_DIR") or os.path.join(HOME_CACHE, "vocabs")
    return os.path.join(d, name)


def template_path(name):
    d = os.environ.get("EBB_CHAT_TEMPLATES_DIR") or os.path.join(HOME_CACHE, "chat-templates")
    return os.path.join(d, name)


# family: (ebb-gen-model shape, vocabulary, chat template, the template's turn-end token text).
# Gemma 3's own template is not among llama.cpp's templates; Gemma 2's has the same turns
# (<start_of_turn>/<end_of_turn>, BOS first) and is what the test renders.
FAMILIES = {
    "llama": ("llama3.1-tiny", "ggml-vocab-llama-bpe.gguf",
              "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|eot_id|>"),
    "qwen2": ("qwen2-tiny", "ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja",
              "<|im_end|>"),
    "qwen3": ("qwen3-tiny", "ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja", "<|im_end|>"),
    "qwen3moe": ("qwen3moe-tiny", "ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja",
                 "<|im_end|>"),
    "gemma3": ("gemma3-tiny", "models:gemma-3-270m-q4_k_m.gguf", "google-gemma-2-2b-it.jinja",
               "<end_of_turn>"),
    "phi3": ("phi3-tiny", "ggml-vocab-phi-3.gguf", "microsoft-Phi-3.5-mini-instruct.jinja",
             "<|end|>"),
    # llama with Mistral's sliding window (16 positions, which the prompt exceeds) and longrope
    # phi3 (a context of 512 runs the long factors).
    "mistral": ("mistral-tiny", "ggml-vocab-llama-spm.gguf",
                "mistralai-Mistral-Nemo-Instruct-2407.jinja", "</s>"),
    "phi3.5": ("phi3.5-tiny", "ggml-vocab-phi-3.gguf", "microsoft-Phi-3.5-mini-instruct.jinja",
               "<|end|>"),
}
ARCH = {"mistral": "llama", "phi3.5": "phi3"}

MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."},
            {"role": "assistant", "content": "Red, orange and yellow."},
            {"role": "user", "content": "And two more?"}]


def gguf_meta(path, keys):
    """The values of a few metadata keys of a GGUF (scalars, strings and string arrays)."""
    scal = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
    out = {}
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the metadata of these files is well within this
    pos = 0

    def take(n):
        nonlocal pos
        b = data[pos:pos + n]
        if len(b) != n:
            raise ValueError(f"{path}: truncated metadata")
        pos += n
        return b

    def u64():
        return struct.unpack("<Q", take(8))[0]

    def string():
        return take(u64()).decode("utf-8", "replace")

    def value(t, want):
        if t == 8:
            return string()
        if t == 9:
            et, n = struct.unpack("<I", take(4))[0], u64()
            items = [value(et, want) for _ in range(n)]
            return items if want else None
        fmt = scal[t]
        return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]

    assert take(4) == b"GGUF"
    take(4)
    u64()
    n_kv = u64()
    for _ in range(n_kv):
        key = string()
        t = struct.unpack("<I", take(4))[0]
        v = value(t, key in keys)
        if key in keys:
            out[key] = v
    return out


def render(template, messages, bos, eos):
    """The template rendered as transformers' apply_chat_template does (sandboxed jinja2,
    trim_blocks and lstrip_blocks, loop controls, raise_exception and strftime_now)."""
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def strftime_now(fmt):
        import datetime
        return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                            bos_token=bos, eos_token=eos, tools=None,
                                            documents=None)


def gen_model():
    g = os.environ.get("EBB_GEN_MODEL")
    if g:
        return g
    binary = os.environ.get("EBB_BIN")
    if not binary:
        pytest.skip("EBB_BIN is not set")
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(binary))), "bench",
                        "ebb-gen-model")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def tokenize(server, text, add_special):
    status, out = server.json("POST", "/tokenize", {"content": text, "add_special": add_special,
                                                    "parse_special": True})
    assert status == 200, out
    return out["tokens"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_chat(family, workdir):
    shape, vocab, tmpl_name, turn_end = FAMILIES[family]
    vocab, tmpl_file = vocab_path(vocab), template_path(tmpl_name)
    for p in (vocab, tmpl_file):
        assert os.path.exists(p), (f"missing {p}: run scripts/fetch-vocabs.sh and "
                                   "scripts/fetch-chat-templates.sh (EBB_VOCABS_DIR, "
                                   "EBB_CHAT_TEMPLATES_DIR, EBB_MODELS_DIR)")
    model = str(workdir / f"{shape}.gguf")
    subprocess.run([gen_model(), "--shape", shape, "--tokenizer-from", vocab, "--type", "q8_0",
                    "--seed", "7", "--chat-template", tmpl_file, "-o", model], check=True,
                   capture_output=True)
    meta = gguf_meta(model, {"general.architecture", "tokenizer.ggml.tokens",
                             "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                             "tokenizer.chat_template"})
    assert meta["general.architecture"] == ARCH.get(family, family)
    with open(tmpl_file) as f:
        template = f.read()
    assert meta["tokenizer.chat_template"] == template
    toks = meta["tokenizer.ggml.tokens"]
    bos_id, eos_id = meta.get("tokenizer.ggml.bos_token_id"), meta["tokenizer.ggml.eos_token_id"]
    bos = toks[bos_id] if bos_id is not None else ""
    eos = toks[eos_id]

    s = Server("--parallel", "1", "--ctx", "512", model=model)
    try:
        client = s.client()
        model_id = client.models.list().data[0].id

        # The prompt: the template's rendering, tokenized as the daemon does.
        text = render(template, MESSAGES, bos, eos)
        adds_bos = tokenize(s, "", True) != []
        if adds_bos and bos and text.startswith(bos):
            text = text[len(bos):]
        expect = tokenize(s, text, True)
        r = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=6,
                                           temperature=0)
        assert r.usage.prompt_tokens == len(expect), (family, text)
        raw = client.completions.create(model=model_id, prompt=expect, max_tokens=6,
                                        temperature=0)
        assert raw.usage.prompt_tokens == len(expect)
        assert r.choices[0].message.content == raw.choices[0].text, (family, text)
        assert r.choices[0].finish_reason == "length", r
        assert r.usage.completion_tokens == 6

        # The end tokens: the template's turn end and the GGUF's EOS.
        ends = {turn_end: None, eos: eos_id}
        for piece in list(ends):
            ids = tokenize(s, piece, False)
            assert len(ids) == 1, (piece, ids)
            if ends[piece] is not None:
                assert ids[0] == ends[piece]
            ends[piece] = ids[0]
        for piece, tid in ends.items():
            r = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=6,
                                               temperature=0, logit_bias={str(tid): 100})
            c = r.choices[0]
            assert c.finish_reason == "stop", (family, piece, r)
            assert r.usage.completion_tokens == 1, (family, piece, r.usage)
            assert c.message.content == "", (family, piece, c.message.content)
            # Streamed: the same end, no piece of the token in any delta.
            st = client.chat.completions.create(model=model_id, messages=MESSAGES,
                                                max_tokens=6, temperature=0, stream=True,
                                                logit_bias={str(tid): 100})
            content, finish = "", None
            for ev in st:
                for ch in ev.choices:
                    content += ch.delta.content or ""
                    finish = ch.finish_reason or finish
            assert finish == "stop" and content == "", (family, piece, content, finish)
    finally:
        rc = s.stop()
    assert rc == 0, s.stderr()
