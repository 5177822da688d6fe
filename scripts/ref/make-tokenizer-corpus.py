#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.json: a deterministic corpus of varied strings used to check
ebb's tokenizers against llama.cpp (see scripts/ref/tokenizer-expect.py).

Every string is valid UTF-8 (Python str without lone surrogates). The random parts use a fixed
seed, so running the script again gives the same file.

Usage: python3 scripts/ref/make-tokenizer-corpus.py [OUT]
"""
import json
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "corpus.json")


def prose():
    return [
        "Hello world",
        "Hello world!",
        " Hello world",
        "hello, world. how are you today?",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "It was the best of times, it was the worst of times, it was the age of wisdom.",
        "Call me Ishmael. Some years ago - never mind how long precisely - having little money.",
        "In 1969, Neil Armstrong became the first person to walk on the Moon.",
        "She sells sea shells by the sea shore.",
        "A man, a plan, a canal: Panama!",
        "To be, or not to be: that is the question.",
        "Mr. and Mrs. Smith went to Washington D.C. on Jan. 3rd.",
        "e.g. i.e. etc. vs. a.m. p.m. U.S.A.",
        "CamelCaseIdentifiersLookLikeThis and snake_case_like_this",
        "URLs: https://example.com/path?query=1&other=two#frag and mailto:someone@example.org",
        "The price is $19.99 (or EUR 17,50) plus 7% tax.",
        "Email me at first.last+tag@sub.example.co.uk, thanks!",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
        "Supercalifragilisticexpialidocious antidisestablishmentarianism",
        "pneumonoultramicroscopicsilicovolcanoconiosis",
        "I said \"no\" and she said 'yes'.",
        "Question? Answer! Exclamation!! Interrobang?!",
        "Once upon a time\nthere lived a king.\n\nThe end.",
        "user: what is 2+2?\nassistant: 4",
        "Dear Sir/Madam,\n\nI am writing to you regarding...\n\nYours faithfully,\nJ. Doe",
        "a b c d e f g h i j k l m n o p q r s t u v w x y z",
        "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "abababababababababababab",
        "The year 2024 had 366 days; 2023 had 365.",
        "Tokenizers split text into pieces called tokens.",
    ]


def code():
    return [
        "def foo(x):\n    return x * 2\n",
        "import numpy as np\n\narr = np.zeros((3, 4), dtype=np.float32)\nprint(arr.shape)",
        "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i)\n",
        "class Foo(Bar):\n    def __init__(self, *args, **kwargs):\n        super().__init__()",
        "#include <stdio.h>\n\nint main(void)\n{\n    printf(\"hello\\n\");\n    return 0;\n}\n",
        "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
        "int *p = &a[i]; p->next = NULL; *p++ = ~0u; x >>= 3; y <<= 2; z ^= w;",
        "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);",
        "function f() { return [1, 2, 3].map(x => x ** 2).filter(Boolean); }",
        "fn main() {\n    let v: Vec<u8> = vec![1, 2, 3];\n    println!(\"{:?}\", v);\n}",
        "impl<'a, T: Clone + 'a> Iterator for It<'a, T> { type Item = &'a T; }",
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
        "<html>\n  <body>\n    <div class=\"x\">Hi &amp; bye</div>\n  </body>\n</html>",
        "<table><tr><td>1</td><td>2</td></tr></table>",
        "{\"key\": \"value\", \"n\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": {}}}",
        "#!/bin/sh\nset -eu\nfor f in *.txt; do echo \"$f\" | wc -c; done 2>/dev/null",
        "(defun fact (n) (if (<= n 1) 1 (* n (fact (- n 1)))))",
        "x = [i**2 for i in range(100) if i % 3 == 0]  # squares",
        "if (a && b || !c) { return a != b ? a : b; } else if (x === y) {}",
        "    indented with four spaces\n        and eight\n",
        "\t\ttabs\tbetween\t\twords\t",
        "// comment\n/* block\n   comment */\n",
        "a=1;b=2;c=a+b;d=c*c-a/b%3",
        "my_var__name = __dunder__ + _private",
        "print('it''s'); print(\"don't\")",
        "\\begin{equation} E = mc^2 \\end{equation}",
        "$ ls -la /usr/local/bin | grep -E '^-rwx' > out.txt",
        "@decorator\ndef g(): pass",
        "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
        "0x1F 0XFF 0b1010 0o777 1e-9 3.14159f 1_000_000",
        "matrix[i][j] += a[i][k] * b[k][j];",
        "<?php echo $var['key']; ?>",
        "git commit -m \"fix: handle CRLF\" && git push origin main",
    ]


def numbers(rng):
    out = []
    for n in range(1, 26):
        out.append("".join(str((i * 7 + n) % 10) for i in range(n)))
    out += [
        "0", "00", "007", "1 2 3", "12 345 6789", "3.14159", "-42", "+7", "1,000,000",
        "1.000.000,00", "2024-06-30", "12:34:56", "(555) 123-4567", "v1.2.3", "10^9",
        "1/2 3/4", "50%", "#1", "No. 42", "4th 21st 22nd 103rd", "1e10", "0.000001",
        "A1B2C3", "abc123def456", "123abc", " 123", "  4567", "1\n2\n3", "x=10,y=20",
        "\u0661\u0662\u0663",  # Arabic-Indic digits
        "\u0967\u0968\u0969",  # Devanagari digits
        "\uff11\uff12\uff13",  # fullwidth digits
        "\u00bd \u00bc \u2155",  # vulgar fractions
        "\u2160\u2161\u2162 \u216b",  # Roman numerals
        "\u00b2\u00b3\u00b9 \u2070",  # superscripts
        "\u2460\u2461\u2462",  # circled digits
        "\U0001d7ce\U0001d7cf",  # math digits
    ]
    for _ in range(8):
        out.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 12))) for _ in range(5)))
    return out


def whitespace():
    out = []
    for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 33]:
        out.append(" " * n)
        out.append("a" + " " * n + "b")
    out += [
        "\t", "\t\t", "\t\t\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", "a\rb",
        "line1\r\nline2\r\n", "trailing spaces   ", "   leading spaces", "  both  ",
        "a\n", "\na", " \n ", "\n \n", "a \nb", "a\t\nb", "x \t \n \r\n y",
        "word \n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n end",
        "\n" * 40, "\t" * 40, " " * 40 + "x",
        "\u00a0", "a\u00a0b", "\u3000", "a\u3000b", "\u2009thin\u2009space", "\u2003em",
        "\x0b", "\x0c", "a\x0bb\x0cc", "\u0085", "a\u2028b\u2029c", "\u202f\u205f",
        "\u1680ogham", " \u00a0 ", "tab\tand space \t", "  \t  \n  \t  ",
        "end with newline\n", "end with two newlines\n\n", "\n\nstart with newlines",
    ]
    return out


def punctuation():
    return [
        "!!!", "???", "...", "!?!?", "?!", "---", "___", "***", "~~~", "===", "+++", "###",
        "@@@", "$$$", "%%%", "^^^", "&&&", "|||", "<<<", ">>>", "<=>", "->", "=>", "::",
        ";;", "''", "\"\"", "``", "...!!!???", "-*-*-", "([{<>}])", "\\/\\/",
        "a.b,c;d:e!f?g", "(hello)", "[world]", "{x}", "<tag>", "foo...bar", "wait—what",
        "\u2014\u2013\u2012", "\u201cquoted\u201d \u2018single\u2019", "\u00bfQu\u00e9?",
        "\u00a1Hola!", "\u00ab\u00bb \u2039\u203a", "\u2026", "\u3002\u3001\uff01\uff1f",
        "\u00a7\u00b6\u2020\u2021", "\u00a9\u00ae\u2122", "\u20ac\u00a3\u00a5\u20b9\u20bf",
        "\u2190\u2192\u2191\u2193", "\u2200x\u2203y: x\u2264y \u2227 y\u2260x",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    ]


def contractions():
    out = []
    for c in ["s", "t", "re", "ve", "m", "ll", "d"]:
        out.append("it'" + c)
        out.append("IT'" + c.upper())
        out.append("It'" + c[0].upper() + c[1:])
    out += [
        "don't won't can't shouldn't I'm you're we've they'll she'd",
        "DON'T WON'T CAN'T I'M YOU'RE WE'VE THEY'LL SHE'D",
        "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "rock 'n' roll",
        "the dog's bone", "the dogs' bones", "it\u2019s curly", "'quoted'", "'", "''tis",
        "O'Neil O'Brien d'Artagnan", "y'all'd've", "'twas", "L'amour", "'ReLl'",
    ]
    return out


def accents():
    words = ["caf\u00e9", "na\u00efve", "r\u00e9sum\u00e9", "\u00fcber", "pi\u00f1ata",
             "fa\u00e7ade", "\u00c5ngstr\u00f6m", "co\u00f6perate", "\u0141\u00f3d\u017a",
             "\u0160\u010derba", "Stra\u00dfe", "\u00e6sir \u00f8l", "Ti\u1ebfng Vi\u1ec7t",
             "Cr\u00e8me br\u00fbl\u00e9e"]
    out = []
    for w in words:
        out.append(unicodedata.normalize("NFC", w))
        out.append(unicodedata.normalize("NFD", w))
    out += [
        "e\u0301", "a\u0300\u0301\u0302\u0303", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u033e\u0351\u0358\u0315G\u0342\u036a\u0350\u030f\u031fO",
        "\u0301 leading combining mark", "x\u20dd", "1\ufe0f\u20e3", "\u0915\u094d\u0937",
    ]
    return out


def scripts():
    return [
        "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
        "\u7b80\u4f53\u4e2d\u6587\u548c\u7e41\u9ad4\u4e2d\u6587",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
        "\u3072\u3089\u304c\u306a \u30ab\u30bf\u30ab\u30ca \u6f22\u5b57",
        "\uff76\uff80\uff76\uff85 half-width",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.", "\u1100\u1161\u11a8",
        "\U00020000\U0002a6d6 \U00030000", "\u4e00\u4e8c\u4e09 123 abc",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
        "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0932\u093f\u0916\u093e \u0939\u0941\u0906",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
        "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0627\u0644\u0633\u0651\u064e\u0644\u0627\u0645\u064f \u0639\u064e\u0644\u064e\u064a\u0652\u0643\u064f\u0645\u0652",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
        "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ba\u03b5\u03af\u03bc\u03b5\u03bd\u03bf",
        "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8", "\u0540\u0561\u0575\u0565\u0580\u0565\u0576",
        "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u09ac\u09be\u0982\u09b2\u09be",
        "\u12a0\u121b\u122d\u129b", "\u1780\u17d2\u1798\u17c2\u179a", "\u0f56\u0f7c\u0f51\u0f0b",
        "mixed English \u4e2d\u6587 \u0639\u0631\u0628\u064a \u0939\u093f\u0902\u0926\u0940 \u0440\u0443\u0441\u0441\u043a\u0438\u0439",
    ]


def emoji():
    return [
        "\U0001f600", "\U0001f44d", "\U0001f44d\U0001f3fd", "\u2764\ufe0f", "\u2764",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
        "\U0001f469\U0001f3fe\u200d\U0001f4bb", "\U0001f3f3\ufe0f\u200d\U0001f308",
        "\U0001f1fa\U0001f1f8", "\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea\U0001f1eb\U0001f1f7",
        "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
        "#\ufe0f\u20e3 0\ufe0f\u20e3", "I \u2764\ufe0f NY \U0001f5fd", "\U0001f389\U0001f389\U0001f389",
        "emoji\U0001f680in\U0001f30dtext", " \U0001f600 ", "\U0001f9d1\u200d\U0001f91d\u200d\U0001f9d1",
        "\u263a\ufe0e \u263a\ufe0f", "\U0001f44b\U0001f3fb\U0001f44b\U0001f3fc\U0001f44b\U0001f3ff",
        "\U0001fae0\U0001fae8", "\U0001f47e\U0001f916\U0001f47d",
        "\U0001f408\u200d\u2b1b", "\u00a9\ufe0f \u2122\ufe0f",
    ]


def unusual():
    return [
        "\ufeff", "\ufeffBOM at start", "zero\u200bwidth\u200bspace", "soft\u00adhyphen",
        "zw\u200cnj zw\u200dj", "rtl\u200fmark\u200eltr", "\u202eevil\u202c",
        "\ufdd0\ufdef", "\ufffe", "\uffff", "\U0001fffe\U0001ffff", "\U0010fffe", "\U0010ffff",
        "\ue000\uf8ff private use", "\U000f0000\U00100000", "\U000e0001\U000e0041",
        "\U0001d400\U0001d401\U0001d402 math bold", "\U00010300\U00010301 old italic",
        "\U00010000 linear b", "\U0001d11e music", "\U00010140 greek numbers",
        "\u0378\u0379 unassigned", "\U0002fffd", "\U0001f02c\U0001f02f", "\uffef",
        "\ufff0\ufff9\ufffa\ufffb", "\ufffc\ufffd", "\u0000x".replace("\u0000", "\u0001"),
        "\x01\x02\x03\x1f\x7f", "\u0080\u0081\u009f", "\u00ff\u0100\u017f",
        "\u0300", "\u034f", "\u180e mongolian vowel separator", "\u2060\u2061\u2062",
        "\U000e0020", "\ua9c1\ua9c2", "\U00016fe0", "\u0d4e", "\u1cf7",
        "a\x00b",
    ]


def special_like():
    return [
        "<|im_start|>", "<|im_end|>", "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>", "<|endoftext|>text after", "before<|endoftext|>", "<|im_start|><|im_end|>",
        "<|im_sta", "im_start|>", "<||>", "<|>", "<|im_start|", "|im_start|>",
        "<end_of_turn>", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
        "<s>", "</s>", "<s>Hello</s>", "<<s>>", "< s >", "<bos>", "<eos>", "<pad>", "<unk>",
        "<mask>", "[multimodal]", "<start_of_image>", "<unused0>", "<unused99>",
        "<b>bold</b> <i>it</i> <code>x</code>", "<table><tbody><tr><td></td></tr></tbody></table>",
        "<h1>Title</h1>\n<p>para</p>", "<repo_name>x<file_sep>y", "<jupyter_code>print(1)",
        "<|eot_id|>", "<|begin_of_text|>", "[INST] hi [/INST]", "<<SYS>>\nsys\n<</SYS>>",
        "<|im_end|><|im_end|><|im_end|>", "text<end_of_turn>more<end_of_turn>",
        "  <s>  ", "\n<s>\n", "<s><s></s></s>",
    ]


def singles():
    out = [""]
    for c in "a Z 0 9 . , ! ? ' \" - _ / \\ ( ) [ ] { } < > @ # $ % ^ & * + = | ~ `".split(" "):
        out.append(c)
    out += ["\u00e9", "\u00df", "\u4e2d", "\u0416", "\u03a9", "\u20ac", "\U0001f600", "\u0e01",
            "\u0905", "\u05d0", "\u0627", "\uac00", "\u3042", "\U00010348"]
    return out


def long_strings(rng):
    lorem = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
             "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
             "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. ")
    out = [lorem * 8, "a" * 1000, "ab" * 600, "\u4e2d\u6587" * 300, "1234567890" * 100,
           " " * 500, "word " * 300, "\U0001f600" * 200, ("def f(x):\n    return x\n\n" * 40),
           "x" * 5000]
    return out


def randoms(rng):
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
            list(" \t\n\r.,;:!?'\"()[]{}<>-_+=*/\\|@#$%^&~`") +
            ["\u00e9", "\u00fc", "\u00f1", "\u00e7", "\u0301", "\u4e2d", "\u6587", "\u65e5",
             "\u3042", "\u30a2", "\ud55c", "\u0416", "\u03bb", "\u05d0", "\u0627", "\u0939",
             "\u093f", "\u0e01", "\u0e34", "\u20ac", "\u2014", "\u201c", "\u00a0", "\u3000",
             "\U0001f600", "\U0001f44d", "\U0001f3fd", "\u200d", "\ufe0f", "\U0001f1fa",
             "\U0001f1f8", "\u0661", "\u00bd", "\ufeff", "\u200b", "\U0001d400", "\ue000"])
    out = []
    for i in range(60):
        n = rng.randint(1, 12 if i < 20 else 80)
        out.append("".join(rng.choice(pool) for _ in range(n)))
    # Word salads with ASCII-only words and varied separators.
    words = ["the", "of", "and", "tokenizer", "GPU", "don't", "I'll", "x86_64", "3.14", "42",
             "naive", "UTF-8", "e-mail", "O'Reilly", "C++", "node.js", "<|im_end|>", "<s>"]
    seps = [" ", "  ", "\t", "\n", ", ", ". ", " - ", "\r\n", "", "   "]
    for _ in range(30):
        out.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(2, 15))))
    return out


# Invalid UTF-8, as hex (JSON strings cannot hold it). Sequences that decode leniently to values
# past U+10FFFF (F4 90.., F5..F7 leads with continuations) are left out: llama.cpp throws on them.
BYTE_CASES = [
    "ff", "61ff62", "80", "8080", "c3", "c328", "e282", "e28228", "f09f98", "f09f9828", "c0af",
    "e080af", "eda080", "edbfbf", "fe", "fffe", "c3a9ff", "61e282ac62", "efbfbd", "2020ff2020",
    "48656c6c6fc3", "e28aff", "3c7c696d5f656e647c3eff", "ff3c7c696d5f656e647c3e", "f5", "f8",
    "fc80", "c1bf", "313233ff343536", "e4bda0e5a5bdff", "f09f9880f09f", "0a0aff0a", "27ff73",
    "2720ff", "c2a0ff", "ffffffffffff", "61c3", "20c3a9c3", "3cff733e", "e282ac80",
]


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else OUT
    rng = random.Random(20261122)
    strings = (prose() + code() + numbers(rng) + whitespace() + punctuation() + contractions() +
               accents() + scripts() + emoji() + unusual() + special_like() + singles() +
               long_strings(rng) + randoms(rng))
    for s in strings:
        s.encode("utf-8")  # raises on lone surrogates: the corpus must be valid UTF-8
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="ascii") as f:
        json.dump({"version": 1, "count": len(strings), "strings": strings,
                   "byte_cases": BYTE_CASES}, f, indent=0,
                  ensure_ascii=True)
        f.write("\n")
    print("%d strings -> %s" % (len(strings), out_path))


if __name__ == "__main__":
    main()
