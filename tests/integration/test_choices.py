"""Several choices per request (`n`) through the official openai client against the real daemon
(the session server: --parallel 4): the choices list, their indexes and finish reasons, usage
(prompt once, completion tokens summed), streams with every choice's chunks and one [DONE],
seeds (choice i draws as a one-choice request with seed + i), the prompt evaluated once and
copied (ebb_kv_copies_total), and the limits."""
import json
import socket
import time

import pytest

from conftest import MODEL_ID, sse_events
from test_api import CHAT, expect_error, metric


def test_chat_greedy_choices_equal(server, client):
    one = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=10,
                                         temperature=0)
    before = metric(server.metrics(), "ebb_kv_copies_total")
    r = client.chat.completions.create(messages=CHAT, max_tokens=10, temperature=0, n=2,
                                       model=MODEL_ID)
    assert [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        assert c.message.role == "assistant"
        assert c.message.content == one.choices[0].message.content
        assert c.finish_reason == one.choices[0].finish_reason
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    assert r.usage.completion_tokens == 2 * one.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert metric(server.metrics(), "ebb_kv_copies_total") == before + 1


def test_chat_seeded_choices(client):
    kw = dict(model=MODEL_ID, messages=CHAT, max_tokens=16, temperature=1.0, top_p=1.0)
    a = client.chat.completions.create(n=3, seed=11, **kw)
    b = client.chat.completions.create(n=3, seed=11, **kw)
    ta = [c.message.content for c in a.choices]
    assert ta == [c.message.content for c in b.choices]
    assert len(set(ta)) > 1, ta
    for i in range(3):
        one = client.chat.completions.create(seed=11 + i, **kw)
        assert one.choices[0].message.content == ta[i]


def collect(stream):
    texts, finish, usage, n_chunks = {}, {}, None, 0
    for ch in stream:
        n_chunks += 1
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            delta = getattr(c, "delta", None)
            piece = (delta.content if delta is not None else c.text) or ""
            texts[c.index] = texts.get(c.index, "") + piece
            if c.finish_reason:
                assert c.index not in finish, "two finish chunks for one choice"
                finish[c.index] = c.finish_reason
    return texts, finish, usage


def test_chat_stream_choices(client):
    kw = dict(messages=CHAT, max_tokens=12, temperature=0.9, seed=5, model=MODEL_ID)
    body = client.chat.completions.create(n=2, **kw)
    texts, finish, usage = collect(client.chat.completions.create(
        n=2, stream=True, stream_options={"include_usage": True}, **kw))
    assert sorted(texts) == [0, 1]
    assert [texts[i] for i in (0, 1)] == [c.message.content for c in body.choices]
    assert [finish[i] for i in (0, 1)] == [c.finish_reason for c in body.choices]
    assert usage.prompt_tokens == body.usage.prompt_tokens
    assert usage.completion_tokens == body.usage.completion_tokens


def test_chat_stream_raw(server):
    events, _, _ = sse_events(server, "/v1/chat/completions",
                              {"messages": CHAT, "max_tokens": 6, "temperature": 0, "n": 2,
                               "stream": True})
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    roles = [c["choices"][0]["index"] for c in chunks if "role" in c["choices"][0]["delta"]]
    assert roles == [0, 1]
    ends = [c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"]]
    assert sorted(ends) == [0, 1]
    for c in chunks:
        assert len(c["choices"]) == 1


def test_completions_choices(client):
    kw = dict(model=MODEL_ID, prompt="The capital of France is", max_tokens=8, temperature=0.8,
              seed=3)
    one = client.completions.create(**kw)
    r = client.completions.create(n=2, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == one.choices[0].text
    assert r.choices[1].text == client.completions.create(**{**kw, "seed": 4}).choices[0].text
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    texts, finish, usage = collect(client.completions.create(
        n=2, stream=True, stream_options={"include_usage": True}, **kw))
    assert [texts[i] for i in (0, 1)] == [c.text for c in r.choices]
    assert [finish[i] for i in (0, 1)] == [c.finish_reason for c in r.choices]
    assert usage.completion_tokens == r.usage.completion_tokens
    # echo puts the prompt before every choice
    e = client.completions.create(n=2, echo=True, **kw)
    assert all(c.text.startswith(kw["prompt"]) for c in e.choices)


def test_choices_with_logprobs_and_grammar(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=5, temperature=0,
                                       n=2, logprobs=True, top_logprobs=2)
    for c in r.choices:
        assert len(c.logprobs.content) >= 1
        assert len(c.logprobs.content[0].top_logprobs) == 2
    assert r.choices[0].logprobs.content[0].token == r.choices[1].logprobs.content[0].token
    g = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=20, n=2,
                                       temperature=1.0, seed=9,
                                       extra_body={"grammar": 'root ::= "yes" | "no"'})
    for c in g.choices:
        assert c.message.content in ("yes", "no")
        assert c.finish_reason == "stop"


@pytest.mark.parametrize("n", [0, 5, 17, "2"])
def test_bad_n(server, n):
    for path, body in (("/v1/chat/completions", {"messages": CHAT}),
                       ("/v1/completions", {"prompt": "hi"})):
        expect_error(server, 400, "POST", path, {**body, "n": n}, param="n")


def test_disconnect_frees_every_slot(server, client):
    before = metric(server.metrics(), "ebb_cancellations_total")
    body = json.dumps({"messages": CHAT, "max_tokens": 400, "stream": True, "n": 3,
                       "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                 + body)
    got = b""
    while got.count(b"data: ") < 8:  # the three role chunks, then tokens
        got += sock.recv(4096)
    assert metric(server.metrics(), "ebb_active_slots") == 3
    sock.close()
    t0 = time.time()
    while time.time() - t0 < 10 and metric(server.metrics(), "ebb_active_slots") > 0:
        time.sleep(0.05)
    assert metric(server.metrics(), "ebb_active_slots") == 0
    assert metric(server.metrics(), "ebb_cancellations_total") == before + 1
    r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=2, n=4)
    assert len(r.choices) == 4
