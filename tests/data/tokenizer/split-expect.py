#!/usr/bin/env python3
"""Records how llama.cpp splits the tokenizer corpus with the pre-tokenizers it runs through its
general regex engine rather than a hand-written splitter (tekken, gpt-4o / llama4,
deepseek-v3, deepseek-coder, deepseek-llm), for
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

# \s of the engine llama.cpp uses: ASCII whitespace (non-ASCII whitespace arrives as \v).
WS = "[ \\t\\n\\v\\f\\r]"
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DS_LETTER_RANGES = [
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA),
    (0x1BC, 0x1BF), (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D),
    (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5),
    (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5),
    (0x13F8, 0x13FD), (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC),
    (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D),
    (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134),
    (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184),
    (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D),
    (0xA680, 0xA69B), (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF),
    (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F),
    (0x104B0, 0x104D3), (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF), (0x1E900, 0x1E943),
]
DS_LETTERS = "".join("%s-%s" % (chr(a), chr(b)) for a, b in DS_LETTER_RANGES)

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
    # LLAMA_VOCAB_PRE_TYPE_QWEN35 (llama.cpp has a hand-written splitter for this expression)
    "qwen35": [("c", rb"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n" + L +
                N + rb"]?[" + L + M + rb"]+|[" + N + rb"]| ?[^\s" + L + M + N +
                rb"]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")],
    # LLAMA_VOCAB_PRE_TYPE_FALCON (the second expression is GPT-2's, hand-written in llama.cpp)
    "falcon": [
        ("c", rb"[" + P + rb"\$\+<=>\^~\|`]+"),
        ("c", rb"'s|'t|'re|'ve|'m|'ll|'d| ?[" + L + rb"]+| ?[" + N + rb"]+| ?[^\s" + L + N +
         rb"]+|\s+(?!\S)"),
        ("c", rb"[0-9][0-9][0-9]"),
    ],
    # LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_CODER
    "deepseek-coder": [
        ("w", "[\r\n]"),
        ("c", rb"\s?[" + L + rb"]+"),
        ("c", rb"\s?[" + P + rb"]+"),
        ("w", CJK),
        ("c", rb"[" + N + rb"]"),
    ],
    # LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM: the cased letters DeepSeek's tokenizer.json lists
    "deepseek-llm": [
        ("w", "[\r\n]"),
        ("w", WS + "?[" + DS_LETTERS + "]+"),
        ("w", WS + "?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"),
        ("w", WS + "+\\Z"),
        ("w", CJK),
        ("c", rb"[" + N + rb"]+"),
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
