"""Speculative decoding in the server (owner: spec): ebb's "speculative" request field and the
--spec serve option give the same text, usage and finish as plain decoding (greedy), streamed
or not, with max_tokens and stop strings landing inside a pass; bad values are 400s naming the
field."""
import json

import pytest

CODE = """Rewrite this function, renaming the variable x to value. Keep everything else the same.

def scale(x, factor):
    if x is None:
        return None
    result = x * factor
    print("scaled", x, "to", result)
    return result
"""


@pytest.fixture(scope="module")
def spec_server(make_server):
    return make_server("--spec", "ngram", "--draft-max", "6", "--ctx", "1024")


def chat(server, spec, **kw):
    body = {"messages": [{"role": "user", "content": CODE}], "temperature": 0, "max_tokens": 80}
    body.update(kw)
    if spec is not None:
        body["speculative"] = spec
    status, j = server.json("POST", "/v1/chat/completions", body)
    assert status == 200, j
    return j


@pytest.fixture(scope="module")
def make_server(request):
    from conftest import Server
    started = []

    def make(*extra, **kw):
        s = Server(*extra, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def same(a, b):
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["choices"][0]["finish_reason"] == b["choices"][0]["finish_reason"]
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert a["usage"][k] == b["usage"][k], k


def spec_counters(server):
    m = server.metrics()
    get = lambda name: int(next(l.split()[1] for l in m.splitlines() if l.startswith(name + " ")))
    return get("ebb_spec_drafted_total"), get("ebb_spec_accepted_total")


def test_same_output_with_and_without(spec_server):
    d0, a0 = spec_counters(spec_server)
    plain = chat(spec_server, False)
    assert spec_counters(spec_server) == (d0, a0)  # no drafts when asked for none
    assert plain["usage"]["completion_tokens"] > 10
    same(plain, chat(spec_server, None))  # the server's --spec ngram
    same(plain, chat(spec_server, {"type": "ngram", "max": 8}))
    same(plain, chat(spec_server, {"type": "none"}))
    d1, a1 = spec_counters(spec_server)
    assert d1 > d0 and a1 > a0, (d0, a0, d1, a1)  # drafts were made, and some were right


def test_limits_inside_a_pass(spec_server):
    for kw in ({"max_tokens": 5}, {"max_tokens": 13}, {"stop": ["result"]}, {"stop": [" x"]}):
        plain = chat(spec_server, False, **kw)
        spec = chat(spec_server, {"type": "ngram", "max": 8}, **kw)
        same(plain, spec)
    assert chat(spec_server, None, max_tokens=5)["usage"]["completion_tokens"] == 5


def test_stream_and_logprobs(spec_server):
    plain = chat(spec_server, False, logprobs=True, top_logprobs=2)
    spec = chat(spec_server, {"type": "ngram"}, logprobs=True, top_logprobs=2)
    same(plain, spec)
    lp = [t["token"] for t in spec["choices"][0]["logprobs"]["content"]]
    assert lp == [t["token"] for t in plain["choices"][0]["logprobs"]["content"]]
    assert len(lp) == spec["usage"]["completion_tokens"]
    text = ""
    for chunk in spec_server.client().chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": CODE}], temperature=0,
            max_tokens=80, stream=True, extra_body={"speculative": {"type": "ngram"}}):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == plain["choices"][0]["message"]["content"]


@pytest.mark.parametrize("bad", ["yes", {"type": "medusa"}, {"type": "ngram", "max": 0},
                                 {"type": "ngram", "max": 65}, {"type": "ngram", "k": 3}, {}])
def test_bad_values(spec_server, bad):
    body = {"messages": [{"role": "user", "content": "hi"}], "speculative": bad}
    status, j = spec_server.json("POST", "/v1/chat/completions", body)
    assert status == 400, j
    assert j["error"]["param"] == "speculative", j
    assert "speculative" in j["error"]["message"], j
