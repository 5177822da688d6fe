#!/usr/bin/env python3
"""Renders the reference chat templates (scripts/fetch-chat-templates.sh puts them in a cache
directory) with Python's jinja2, set up as Hugging Face transformers renders chat templates, over
a fixed set of conversations, and writes what each render gives (the text, or that it raised)
to expected/<template>.json, plus the conversations to expected/conversations.json.
tests/unit/test-jinja-conformance.c renders the same templates with ebb's interpreter and
compares byte for byte.

The environment matches transformers' chat template compiler: an ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and the loopcontrols extension; a tojson filter that keeps key
order and non-ASCII text (json.dumps with ensure_ascii=False); the globals raise_exception and
strftime_now (here a fixed date, so the data is reproducible). {% generation %} blocks render
their body (transformers' AssistantTracker does the same when no mask is asked for).

Usage: gen-conformance.py TEMPLATES_DIR"""
import datetime
import hashlib
import json
import os
import sys

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'expected')
NOW = datetime.datetime(2025, 1, 15, 10, 30, 0)

TOOLS = [{
    'type': 'function',
    'function': {
        'name': 'get_weather',
        'description': 'Get the current weather in a city.',
        'parameters': {
            'type': 'object',
            'properties': {
                'city': {'type': 'string', 'description': 'The city name'},
                'unit': {'type': 'string', 'enum': ['celsius', 'fahrenheit']},
            },
            'required': ['city'],
        },
    },
}]

# Nine alphanumeric characters: Mistral's templates insist on that shape.
TOOL_CALL = {'id': 'call12345', 'type': 'function',
             'function': {'name': 'get_weather', 'arguments': {'city': 'Paris'}}}

# Each conversation: an id, the messages, and whether the tools are passed.
CONVERSATIONS = [
    ('user', [{'role': 'user', 'content': 'Hello!'}], False),
    ('system-user', [{'role': 'system', 'content': 'You are terse.'},
                     {'role': 'user', 'content': 'Hi there'}], False),
    ('multi-turn', [{'role': 'system', 'content': 'Be nice.'},
                    {'role': 'user', 'content': '  What is 2+2? \n'},
                    {'role': 'assistant', 'content': 'It is 4.'},
                    {'role': 'user', 'content': 'Ünïcödé ✓ and "quotes"'}], False),
    ('tools', [{'role': 'system', 'content': 'You can call tools.'},
               {'role': 'user', 'content': 'Weather in Paris?'}], True),
    ('tool-call', [{'role': 'user', 'content': 'Weather in Paris?'},
                   {'role': 'assistant', 'content': '', 'tool_calls': [TOOL_CALL]},
                   {'role': 'tool', 'tool_call_id': 'call12345', 'name': 'get_weather',
                    'content': '{"temperature": 18, "unit": "celsius"}'},
                   {'role': 'assistant', 'content': 'It is 18 °C in Paris.'},
                   {'role': 'user', 'content': 'Thanks'}], True),
    # What OpenAI clients send: null content next to tool_calls (some templates reject it).
    ('tool-call-null', [{'role': 'system', 'content': 'Use tools.'},
                        {'role': 'user', 'content': 'Weather in Paris?'},
                        {'role': 'assistant', 'content': None, 'tool_calls': [TOOL_CALL]},
                        {'role': 'tool', 'tool_call_id': 'call12345', 'name': 'get_weather',
                         'content': '18 degrees'}], True),
    # Text users paste (issue 30): Unicode whitespace around messages, which str.strip() and
    # |trim remove (NBSP, U+3000, U+2028, U+2003, U+0085; U+200B is not whitespace), and
    # characters repr() escapes when a template prints a list or a dict (\xa0, \x85,
    # \u2028, \u200b, \x7f; tojson(ensure_ascii=True) writes DEL as \u007f).
    ('unicode-space', [{'role': 'system', 'content': '\u3000\xa0You are terse.\u2028'},
                       {'role': 'user', 'content': '\xa0\u3000 What is 2+2?\u2003\n\x85'},
                       {'role': 'assistant', 'content': '\u2029 It is 4.\u200b \u3000'},
                       {'role': 'user', 'content': '\u3000Thanks\xa0!\xa0'}], False),
    ('unicode-parts', [{'role': 'user', 'content': [
                           {'type': 'text', 'text': 'Price:\xa0100\u202f€, line\u2028break'},
                           {'type': 'text', 'text': 'zero\u200bwidth, del\x7f, nel\x85, '
                                                    'tab\t, bom\ufeff, é ✓'}]},
                       {'role': 'assistant', 'content': [
                           {'type': 'text', 'text': '\xa0Noted\u3000'}]},
                       {'role': 'user', 'content': 'And in\u00a0Paris?'}], False),
    ('unicode-tool', [{'role': 'user', 'content': 'Weather in\xa0Paris?\u2028'},
                      {'role': 'assistant', 'content': '',
                       'tool_calls': [{'id': 'call12345', 'type': 'function',
                                       'function': {'name': 'get_weather',
                                                    'arguments': {'city': 'Paris\xa0\u200b',
                                                                  'note': 'a\x7fb\x85c\u2028'}}}]},
                      {'role': 'tool', 'tool_call_id': 'call12345', 'name': 'get_weather',
                       'content': '{"temperature": "18\xa0°C\u2028"}'},
                      {'role': 'user', 'content': '\u3000Thanks\u3000'}], True),
]
BOS, EOS = '<s>', '</s>'


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: renders the body."""
    tags = {'generation'}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(('name:endgeneration',), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, 'jinja2.ext.loopcontrols'])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env


# Small templates, one construct or a few each, for tests/unit/test-jinja.c. Variables: x a dict,
# xs a list, s a string, n an int, none_v None.
VARS = {'x': {'b': 1, 'a': [1, 2.5, 'é'], 'name': 'Ann'}, 'xs': [3, 1, 2],
        's': '  Hello, World  ', 'n': 7, 'none_v': None,
        'msgs': [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'},
                 {'role': 'user', 'content': 'c', 'extra': True}]}
CONSTRUCTS = [
    '{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}',
    '{% if n < 5 %}a{% elif n == 7 %}b{% else %}c{% endif %}',
    '{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}'
    '{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}',
    '{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else "-" }}'
    '{{ loop.nextitem is defined }};{% endfor %}',
    '{% for m in [] %}x{% else %}empty{% endfor %}',
    '{% for m in msgs if m.role == "user" %}{{ loop.index }}:{{ m.content }}/{{ loop.length }} '
    '{% endfor %}',
    '{% for m in msgs | selectattr("role", "equalto", "user") %}{{ m.content }}{% endfor %}',
    '{% for k, v in x.items() %}{{ k }}={{ v }};{% endfor %}',
    '{% for k in x %}{{ k }}{% endfor %}{% for ch in "héllo" %}[{{ ch }}]{% endfor %}',
    '{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}'
    '{% endif %}{{ i }}{% endfor %}',
    '{% set a = 1 %}{% for i in xs %}{% set a = a + i %}{% endfor %}{{ a }}',
    '{% set ns = namespace(total=0, seen=[]) %}{% for i in xs %}{% set ns.total = ns.total + i %}'
    '{% endfor %}{{ ns.total }}',
    '{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, "x") %}{{ t[1] }}',
    '{% set block | upper %}inner {{ n }}{% endset %}[{{ block }}]',
    '{% macro greet(name, punct="!") %}Hi {{ name }}{{ punct }}{% endmacro %}'
    '{{ greet("Bo") }} {{ greet("Al", punct="?") }} {{ greet(name="Cy") }}',
    '{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside {{ n }}{% endcall %}',
    '{% macro v() %}{{ varargs | length }}{{ kwargs.k }}{% endmacro %}{{ v(1, 2, k=3) }}',
    '{% filter upper %}shout {{ s | trim }}{% endfilter %}',
    'a  \n  {%- if true -%}  b  {%- endif -%}  \n c',
    'line1\n    {% if true %}\n    kept\n    {% endif %}\nend',
    'x {%+ if true %}y{% endif +%}\nz',
    '{# comment #}a\n{# another -#}  b{{- " c " -}}  d',
    '{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }}'
    ' {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 3.0 }} {{ 1e20 }} {{ 10 / 4 }} {{ 2.5 * 2 }}',
    '{{ "a" ~ 1 ~ none ~ true }} {{ "ab" * 3 }} {{ [1] + [2] }} {{ "x" + "y" }}',
    '{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ "a" < "b" }} {{ [1, 2] < [1, 3] }} {{ true == 1 }}',
    '{{ "ell" in s }} {{ 2 in xs }} {{ "b" in x }} {{ "z" not in x }} {{ 9 not in xs }}',
    '{{ x is mapping }} {{ xs is iterable }} {{ s is string }} {{ n is number }}'
    ' {{ n is integer }} {{ none_v is none }} {{ nope is defined }} {{ nope is undefined }}'
    ' {{ xs is sequence }} {{ x is sequence }} {{ n is odd }} {{ n is even }}'
    ' {{ n is divisibleby 7 }} {{ true is boolean }} {{ 1.5 is float }} {{ s is not none }}',
    '{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ "xxhixx".strip("x") }}'
    '|{{ s.split(",") }}|{{ " a  b ".split() }}|{{ "a,b,c".split(",", 1) }}'
    '|{{ "a,b,c".rsplit(",", 1) }}',
    '{{ s.startswith("  He") }} {{ s.endswith("d  ") }} {{ "ab".startswith(("x", "a")) }}'
    ' {{ s.replace("l", "L") }} {{ s.upper() }} {{ s.lower() }} {{ "hello world".title() }}'
    ' {{ "hello".capitalize() }} {{ s.find("o") }} {{ s.count("l") }} {{ "-".join(["a", "b"]) }}',
    '{{ "{} and {}".format("a", 1) }} {{ "{0}{0}{name}".format("z", name="n") }}',
    '{{ x.get("b") }} {{ x.get("zz", "dflt") }} {{ x.get("zz") }} {{ x.keys() | list }}'
    ' {{ x.values() | list | length }} {{ x["name"] }} {{ x.name }} {{ x.missing is defined }}',
    '{{ s | trim }}|{{ s | length }}|{{ "é" | length }}|{{ xs | join(",") }}'
    '|{{ msgs | map(attribute="role") | join(" ") }}|{{ xs | sort }}|{{ xs | sort(reverse=true) }}'
    '|{{ ["b", "A", "a"] | sort }}|{{ [1, 2, 1, 3] | unique | list }}|{{ xs | first }}'
    '|{{ xs | last }}|{{ xs | max }}|{{ xs | min }}|{{ xs | sum }}|{{ xs | reverse | list }}',
    '{{ nope | default("d") }}|{{ "" | default("e", true) }}|{{ none_v | default("f") }}'
    '|{{ "5" | int + 1 }}|{{ "x" | int }}|{{ 3.7 | int }}|{{ 2 | float }}|{{ n | string }}'
    '|{{ "Ab" | upper }}{{ "Ab" | lower }}|{{ "a b" | title }}|{{ "ab" | capitalize }}'
    '|{{ "aXbX" | replace("X", "-") }}|{{ x | dictsort }}|{{ x | items | list | length }}',
    '{{ msgs | selectattr("extra") | list | length }}'
    '|{{ msgs | rejectattr("role", "equalto", "user") | map(attribute="content") | list }}'
    '|{{ xs | select("odd") | list }}|{{ xs | reject("odd") | list }}'
    '|{{ ["a", "b"] | map("upper") | list }}|{{ msgs | map(attribute="nope", default="z") | list }}',
    '{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ "é\\n\\"\\t" | tojson }}'
    '|{{ "é" | tojson(ensure_ascii=True) }}|{{ [1, none, true, 1.5] | tojson }}'
    '|{{ x | tojson(separators=(",", ":")) }}|{{ {"b": 1, "a": 2} | tojson(sort_keys=true) }}',
    '{{ "a\nb\n\nc" | indent(2) }}|{{ "a\nb" | indent(4, first=true) }}'
    '|{{ "a\n\nb" | indent(2, blank=true) }}',
    '{{ s[2:7] }}|{{ s[::-1] }}|{{ xs[1:] }}|{{ xs[-1] }}|{{ xs[::2] }}|{{ "héllo"[1:3] }}'
    '|{{ "héllo"[-2:] }}|{{ xs[5] is defined }}',
    '{{ strftime_now("%Y-%m-%d %d %b %Y") }}',
    '{{ bos_token }}{{ eos_token }}',
    '{{ x }}|{{ xs }}|{{ none_v }}|{{ true }}|{{ "it\'s" }}|{{ [s] }}|{{ {"k": none} }}',
    '{{ "<b>" | safe + "<i>" }}|{{ "<" + "x" }}',
    '{{ (xs | map("string") | list) }}{{ xs | map("string") | join }}',
    '{% if xs | selectattr("nope") %}gen-is-true{% endif %}',
    '{{ n if n > 3 else "small" }}|{{ "yes" if nope }}|{{ none_v or "alt" }}|{{ 0 and 1 }}',
    '{{ -n }} {{ +n }} {{ not n }} {{ not none_v }}',
    '{{ raise_exception("bad conversation") }}',
    '{{ xs.append(4) }}',
    '{{ nope.attr }}',
    '{{ "a" + 1 }}',
    '{{ none_v | length }}',
    '{{ xs | selectattr("x") | length }}',
    '{% if false %}{{ s | from_json }}{% endif %}guarded',
    '{% for m in none_v %}{% endfor %}',
    '{{ 1 / 0 }}',
    # Python's string semantics on text users paste (issue 30): str.isspace() whitespace for
    # strip/trim/split/isspace, code points for strip(chars), repr() of what is not printable,
    # and DEL under tojson(ensure_ascii=True).
    '{% set u = "\xa0\u3000 a\u2003b\u200b \u2028\x85\u205f" %}[{{ u.strip() }}]'
    '[{{ u.lstrip() }}][{{ u.rstrip() }}][{{ u | trim }}]{{ u.split() }}{{ u.split(None, 1) }}'
    '{{ u.rsplit(None, 1) }}{{ u.isspace() }}{{ "\u3000\xa0\x1c".isspace() }}'
    '{{ "\u200b".isspace() }}',
    '{{ "«x»".strip("«»") }}|{{ "éaé".lstrip("é") }}|{{ "ab✓✓".rstrip("✓") }}'
    '|{{ "\xa0x\xa0".strip(" ") }}|{{ "\xa0x\xa0".strip("\xa0") }}',
    '{{ ["\xa0", "\x85", "\u2028", "\u200b", "\x7f", "é✓€", "\U000e0001", "\ufeff",'
    ' "\u0378", "\U0001f600", "it\'s\xa0"] }}|{{ {"k\xa0": "v\u2029", "t": ("\u00ad",)} }}',
    '{{ "a\x7fb\xa0é\U0001f600" | tojson(ensure_ascii=True) }}|{{ "a\x7fb" | tojson }}',
]


def main():
    src_dir = sys.argv[1]
    env0 = make_env()
    out = []
    for src in CONSTRUCTS:
        case = {'template': src}
        try:
            case['output'] = env0.from_string(src).render(bos_token=BOS, eos_token=EOS,
                                                           **VARS)
        except Exception as e:
            case['error'] = f'{type(e).__name__}: {e}'
        out.append(case)
    with open(os.path.join(HERE, 'constructs.json'), 'w') as f:
        json.dump({'vars': VARS, 'bos_token': BOS, 'eos_token': EOS, 'cases': out}, f, indent=1,
                  ensure_ascii=False)
        f.write('\n')
    os.makedirs(OUT, exist_ok=True)
    env = make_env()
    with open(os.path.join(OUT, 'conversations.json'), 'w') as f:
        json.dump({'bos_token': BOS, 'eos_token': EOS, 'now': NOW.isoformat(), 'tools': TOOLS,
                   'conversations': [{'id': i, 'messages': m, 'tools': t}
                                     for i, m, t in CONVERSATIONS]},
                  f, indent=1, ensure_ascii=False)
    names = sorted(n for n in os.listdir(src_dir) if n.endswith('.jinja'))
    for name in names:
        src = open(os.path.join(src_dir, name), encoding='utf-8').read()
        doc = {'template': name, 'sha256': hashlib.sha256(src.encode()).hexdigest()}
        try:
            t = env.from_string(src)
        except jinja2.exceptions.TemplateError as e:
            doc['load_error'] = f'{type(e).__name__}: {e}'
            t = None
        cases = []
        for conv_id, msgs, with_tools in CONVERSATIONS if t else []:
            for agp in (False, True):
                case = {'conversation': conv_id, 'add_generation_prompt': agp}
                # transformers always passes tools and documents, None when not given.
                kw = {'messages': msgs, 'tools': TOOLS if with_tools else None,
                      'documents': None, 'add_generation_prompt': agp, 'bos_token': BOS,
                      'eos_token': EOS}
                try:
                    case['output'] = t.render(**kw)
                except Exception as e:  # what the template raises is part of the reference
                    case['error'] = f'{type(e).__name__}: {e}'
                cases.append(case)
        doc['cases'] = cases
        stem = name[:-len('.jinja')]
        with open(os.path.join(OUT, stem + '.json'), 'w') as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write('\n')
    print(len(names), 'templates')


if __name__ == '__main__':
    main()
