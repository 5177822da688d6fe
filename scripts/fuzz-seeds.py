#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/seeds/TARGET/) from the request bodies of
the integration tests (every dict literal in tests/integration/test_*.py that is a chat,
completions, tokenize or detokenize body, module constants such as CHAT substituted) and the
chat templates in tests/data/chat-templates/. Seeds are small and named by content hash, so a
rerun only adds new ones.

    scripts/fuzz-seeds.py [OUT_DIR]        (default tests/fuzz/seeds)
"""
import ast
import glob
import hashlib
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def literal(node, consts):
    """The value of a literal expression, module constants substituted; None if not literal."""
    class Sub(ast.NodeTransformer):
        def visit_Name(self, n):
            if n.id in consts:
                return ast.parse(repr(consts[n.id]), mode="eval").body
            if n.id in ("True", "False", "None"):
                return n
            raise ValueError(n.id)
    try:
        return ast.literal_eval(Sub().visit(ast.parse(ast.unparse(node), mode="eval")))
    except (ValueError, SyntaxError, TypeError):
        return None


def bodies():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/integration/test_*.py"))):
        tree = ast.parse(open(path).read())
        consts = {}
        for st in tree.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                v = literal(st.value, consts)
                if v is not None:
                    consts[st.targets[0].id] = v
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                v = literal(node, consts)
                if isinstance(v, dict):
                    out.append(v)
    return out


def write(d, data):
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/fuzz/seeds")
    texts = set()
    contexts = []
    for b in bodies():
        raw = json.dumps(b, ensure_ascii=False).encode()
        if len(raw) > 4096:
            continue
        if "messages" in b:
            write(out + "/request", b"\0" + raw)
            if isinstance(b["messages"], list):
                contexts.append({"messages": b["messages"], "add_generation_prompt": True,
                                 "bos_token": "<s>", "eos_token": "</s>"})
                for m in b["messages"]:
                    if isinstance(m, dict) and isinstance(m.get("content"), str):
                        texts.add(m["content"])
        if "prompt" in b:
            write(out + "/request", b"\1" + raw)
            if isinstance(b["prompt"], str):
                texts.add(b["prompt"])
        if isinstance(b.get("content"), str):
            texts.add(b["content"])
        if isinstance(b.get("tokens"), list) and all(isinstance(t, int) for t in b["tokens"]):
            write(out + "/tokenize", b"\1" + b"".join(struct.pack("<I", t & 0xffffffff)
                                                      for t in b["tokens"]))
    for t in sorted(texts):
        data = t.encode("utf-8", "surrogatepass")
        write(out + "/tokenize", b"\6" + data)
        write(out + "/output", data)
    ctx = contexts[:4] or [{"messages": [{"role": "user", "content": "Hi"}]}]
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/data/chat-templates/*.jinja"))):
        src = open(path, "rb").read()
        for c in ctx:
            write(out + "/jinja", src + b"\0" + json.dumps(c, ensure_ascii=False).encode())


if __name__ == "__main__":
    main()
