#!/usr/bin/env python3
"""Renders the chat templates in this folder with jinja2 (as Hugging Face transformers does:
trim_blocks, lstrip_blocks) and writes cases.json, which tests/unit/test-api.c compares the C
renderer against. bos_token is rendered empty because ebb's tokenizer adds BOS itself."""
import json, os
import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {  # file -> family ebb must recognise
    'smollm2.jinja': 'chatml', 'qwen2.5.jinja': 'chatml', 'gemma3.jinja': 'gemma',
    'llama3.jinja': 'llama3', 'mistral.jinja': 'mistral',
}
CONVS = [
    [{'role': 'user', 'content': 'Hello!'}],
    [{'role': 'system', 'content': 'You are terse.'}, {'role': 'user', 'content': 'Hi'}],
    [{'role': 'user', 'content': '  What is 2+2? \n'}, {'role': 'assistant', 'content': '4'},
     {'role': 'user', 'content': 'And 3+3?'}],
    [{'role': 'system', 'content': 'Be nice.'}, {'role': 'user', 'content': 'One'},
     {'role': 'assistant', 'content': ' Two '}, {'role': 'user', 'content': 'Ünïcödé ✓'}],
]

def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)

env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
env.globals['raise_exception'] = raise_exception
cases = []
sources = {}
for name, family in TEMPLATES.items():
    src = open(os.path.join(HERE, name)).read()
    sources[name] = {'family': family, 'source': src}
    t = env.from_string(src)
    for conv in CONVS:
        for agp in (True, False):
            try:
                out = t.render(messages=conv, add_generation_prompt=agp, bos_token='',
                               eos_token='</s>')
            except jinja2.exceptions.TemplateError:
                continue  # a conversation this template rejects
            cases.append({'template': name, 'messages': conv, 'add_generation_prompt': agp,
                          'expected': out})
with open(os.path.join(HERE, 'cases.json'), 'w') as f:
    json.dump({'templates': sources, 'cases': cases}, f, indent=1, ensure_ascii=False)
print(len(cases), 'cases')
