#!/usr/bin/env python3
"""scripts/check-layers.py finds what it is for: a copy of the tree passes, and each planted
violation (an upward include, also between api/'s rooms, another folder's internal header, an
include that resolves to nothing, a header circle, a room of api/ without a layer) makes it fail
naming the file."""
import os
import shutil
import subprocess
import sys
import tempfile

root = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
script = os.path.join(root, 'scripts', 'check-layers.py')


def run(tree):
    return subprocess.run([sys.executable, script, '--root', tree], capture_output=True, text=True)


def append(tree, rel, text):
    os.makedirs(os.path.dirname(os.path.join(tree, rel)), exist_ok=True)
    with open(os.path.join(tree, rel), 'a') as f:
        f.write(text)


plants = [
    ('upward include', 'runtime/gguf/gguf.c', '#include "model/model.h"\n', 'runtime/gguf/gguf.c'),
    ('upward include from api', 'api/openai/params.c', '#include "daemon/config.h"\n',
     'api/openai/params.c'),
    ('internal header', 'api/http/objects.c', '#include "model/model-int.h"\n', 'internal to'),
    ('unresolved', 'runtime/cl/cl.c', '#include "no-such-header.h"\n', 'does not resolve'),
    ('header circle', 'runtime/base/err.h', '#include "base/log.h"\n', 'circle'),
    ('api room using the edge', 'api/jinja/jinja-lex.c', '#include "api/http/http.h"\n',
     'api/jinja may not use api/http'),
    ('edge using a protocol', 'api/http/limits.c', '#include "api/openai/openai.h"\n',
     'api/http may not use api/openai'),
    ('daemon inside api', 'daemon/serve.c', '#include "api/http/http.h"\n',
     'daemon may not use api/http'),
    ('api room without a layer', 'api/lmstudio/lmstudio.c', '#include "api/http/http.h"\n',
     'no entry in LAYERS'),
]
failed = 0
with tempfile.TemporaryDirectory() as tmp:
    base = os.path.join(tmp, 'clean')
    os.mkdir(base)
    for d in ('runtime', 'api', 'daemon', 'bench', 'tests', 'scripts'):
        shutil.copytree(os.path.join(root, d), os.path.join(base, d),
                        ignore=shutil.ignore_patterns('*.gguf', '*.bin', 'data'))
    r = run(base)
    if r.returncode != 0:
        print('FAIL: the clean tree does not pass:\n' + r.stdout)
        failed += 1
    else:
        print('ok: clean tree passes')
    for name, rel, text, expect in plants:
        tree = os.path.join(tmp, name.replace(' ', '-'))
        shutil.copytree(base, tree)
        if name == 'header circle':
            append(tree, 'runtime/base/log.h', '#include "err.h"\n')
        append(tree, rel, text)
        r = run(tree)
        if r.returncode == 1 and expect in r.stdout:
            print(f'ok: {name} caught: {r.stdout.splitlines()[0]}')
        else:
            print(f'FAIL: {name} not caught (status {r.returncode}):\n{r.stdout}')
            failed += 1
print(f'check-layers planted: {len(plants) + 1 - failed} ok, {failed} failed')
sys.exit(1 if failed else 0)
