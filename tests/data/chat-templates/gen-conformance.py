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


def main():
    src_dir = sys.argv[1]
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
