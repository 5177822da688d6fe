#!/usr/bin/env python3
"""Records how llama.cpp splits the tokenizer corpus with the pre-tokenizers it runs through its
general regex engine rather than a hand-written splitter (tekken, gpt-4o / llama4,
deepseek-v3), for
tests/unit/test-tokenizer.c, when no reference vocabulary with llama.cpp's ids exists for them.

llama.cpp's path is reproduced step by step: every code point of the text becomes one
character ("collapsed" text: ASCII as itself, non-ASCII whitespace as \\v, other non-ASCII code
points as one stand-in byte per general category: L 0xD2, N 0xD1, P 0xD3, M 0xD4, S 0xD5,
anything else 0xD0), \\p{L} / \\p{N} in the expression become [\\xD2A-Za-z] / [\\xD10-9], and
the expression that llama.cpp's llama-vocab.cpp holds for the pre-tokenizer is run over the
collapsed bytes with a backtracking engine of the same semantics (leftmost match, ordered
alternatives, greedy quantifiers, lookahead; \\s is ASCII whitespace). Matches and the text
between them are the pieces. Categories come from Python's unicodedata; with a Unicode version
other than llama.cpp's 15.1, strings holding a code point that Python has unassigned are
recorded as null and not checked (Python 3.13 has 15.1).

Writes tests/data/tokenizer/expect-split.json: {"unicode": version, "pre": {name: [[piece
lengths in code points] or null, per corpus string]}}.
Usage: python3 tests/data/tokenizer/split-expect.py
"""
import json
import os
import re
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))

# llama.cpp's White_Space list (the one runtime/tokenizer/unicode-data.c holds).
WHITESPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001, 0x2002,
              0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029,
              0x202F, 0x205F, 0x3000}
STAND_IN = {"L": 0xD2, "N": 0xD1, "P": 0xD3, "M": 0xD4, "S": 0xD5}


def collapse(text):
    out = bytearray()
    for ch in text:
        cp = ord(ch)
        if cp < 128:
            out.append(cp)
        elif cp in WHITESPACE:
            out.append(0x0B)
        else:
            out.append(STAND_IN.get(unicodedata.category(ch)[0], 0xD0))
    return bytes(out)


L = rb"\xD2A-Za-z"
N = rb"\xD10-9"
UP = rb"((?=[" + L + rb"])([^a-z]))"
LOW = rb"((?=[" + L + rb"])([^A-Z]))"
PRE = rb"[^\r\n" + L + N + rb"]"
CONTRACTION = rb"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
TAIL = rb"| ?[^\s" + L + N + rb"]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
P = rb"\xD3!-#%-*,-/:-;?-@\[-\]_\{\}"
S = rb"\xD5\$\+<->\^`\|~"
M = rb"\xD4"

# Each pre-tokenizer is a list of stages: "c" runs a bytes expression over the collapsed text,
# "w" a str expression over the code points (non-ASCII whitespace as \v), as llama.cpp does for
# expressions without \p{...}.
EXPRESSIONS = {
    # LLAMA_VOCAB_PRE_TYPE_TEKKEN
    "tekken": [("c", PRE + rb"?" + UP + rb"*" + LOW + rb"+|" + PRE + rb"?" + UP + rb"+" + LOW +
                rb"*|[" + N + rb"]" + TAIL)],
    # LLAMA_VOCAB_PRE_TYPE_GPT4O (gpt-4o, llama4)
    "gpt-4o": [("c", PRE + rb"?" + UP + rb"*" + LOW + rb"+" + CONTRACTION + rb"?|" + PRE + rb"?" +
                UP + rb"+" + LOW + rb"*" + CONTRACTION + rb"?|[" + N + rb"]{1,3}" + TAIL)],
    # LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM (deepseek-v3)
    "deepseek-v3": [
        ("c", rb"[" + N + rb"]{1,3}"),
        ("w", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
        ("c", rb"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n" + L + P + S + rb"]?[" +
         L + M + rb"]+| ?[" + P + S + rb"]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ],
}


def widen(text):
    return "".join("\x0b" if ord(ch) > 127 and ord(ch) in WHITESPACE else ch for ch in text)


def split_one(mode, expr, text):
    data = collapse(text) if mode == "c" else widen(text)
    lens, prev = [], 0
    for m in expr.finditer(data):
        if m.start() > prev:
            lens.append(m.start() - prev)
        lens.append(m.end() - m.start())
        prev = m.end()
    if prev < len(data):
        lens.append(len(data) - prev)
    return lens


def split(stages, text):
    pieces = [text]
    for mode, expr in stages:
        nxt = []
        for piece in pieces:
            pos = 0
            for n in split_one(mode, expr, piece):
                nxt.append(piece[pos:pos + n])
                pos += n
        pieces = nxt
    return [len(p) for p in pieces]


def main():
    with open(os.path.join(HERE, "corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)["strings"]
    # A code point unassigned in Python's Unicode database may be assigned in llama.cpp's
    # (15.1): strings holding one are recorded as null (not checked) unless the versions agree.
    same = unicodedata.unidata_version == "15.1.0"

    def known(text):
        return same or all(unicodedata.category(ch) != "Cn" for ch in text)

    out = {"unicode": unicodedata.unidata_version,
           "pre": {name: [split([(m, re.compile(e)) for m, e in st], s) if known(s) else None
                          for s in corpus]
                   for name, st in EXPRESSIONS.items()}}
    with open(os.path.join(HERE, "expect-split.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
