"""/v1/messages (Anthropic's Messages API) through the official anthropic client against the real
daemon and SmolLM2: a message, a stream (raw event order, and the SDK's stream helper), system
prompts, stop_sequences, max_tokens, a tool_use round trip (non-stream and streamed, results sent
back as tool_result), authentication by x-api-key, and Anthropic-style errors for bad
requests."""
import json

import anthropic
import pytest

from conftest import MODEL_ID

HELLO = [{"role": "user", "content": "Write one sentence about the sea."}]
# Greedy decoding. Recent anthropic clients no longer take sampling arguments as keywords, so
# they travel in extra_body, which every version passes through.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def aclient(server):
    return anthropic.Anthropic(base_url=server.base, api_key="none", max_retries=0, timeout=120)


def test_message(aclient):
    m = aclient.messages.create(model=MODEL_ID, max_tokens=24, messages=HELLO, **GREEDY)
    assert m.type == "message"
    assert m.role == "assistant"
    assert m.id.startswith("msg_")
    assert m.model == MODEL_ID
    assert len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text.strip()
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.stop_sequence is None
    assert m.usage.input_tokens > 5
    assert 1 <= m.usage.output_tokens <= 24


def test_max_tokens(aclient):
    m = aclient.messages.create(model=MODEL_ID, max_tokens=3, messages=HELLO)
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 3


def raw_events(server, body):
    """The raw SSE of a streamed request as (event name, data dict) pairs; keep-alive comments
    skipped. Every event has an `event:` line naming its data's type."""
    status, hdrs, data = server.request("POST", "/v1/messages", dict(body, stream=True))
    assert status == 200, data
    assert hdrs["content-type"] == "text/event-stream"
    text = data.decode()
    assert text.endswith("\n\n")
    out = []
    for block in text.split("\n\n")[:-1]:
        lines = [l for l in block.split("\n") if not l.startswith(":")]
        if not lines:
            continue
        assert len(lines) == 2 and lines[0].startswith("event: ") and \
            lines[1].startswith("data: "), block
        name, payload = lines[0][7:], json.loads(lines[1][6:])
        assert payload["type"] == name
        out.append((name, payload))
    return out


def test_stream_events_in_order(aclient, server):
    kw = dict(model=MODEL_ID, max_tokens=16, messages=HELLO, **GREEDY)
    raw = raw_events(server, {"model": MODEL_ID, "max_tokens": 16, "messages": HELLO,
                              "temperature": 0})
    names = [n for n, _ in raw]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    raw_text = "".join(p["delta"]["text"] for n, p in raw if n == "content_block_delta")

    # The same through the SDK's raw event stream (it drops pings).
    events = list(aclient.messages.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types[:2] == ["message_start", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0].message
    assert start.id.startswith("msg_") and start.content == [] and start.stop_reason is None
    assert start.usage.input_tokens > 5
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert all(d.index == 0 and d.delta.type == "text_delta" for d in deltas)
    text = "".join(d.delta.text for d in deltas)
    assert text == raw_text
    delta = events[-2]
    assert delta.delta.stop_reason in ("end_turn", "max_tokens")
    assert delta.usage.output_tokens >= len(deltas) - 1

    # The SDK's stream helper accumulates the same text and the final message; greedy decoding
    # makes it equal to the non-streamed answer.
    with aclient.messages.stream(**kw) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text
    assert final.content[0].text == text
    assert final.stop_reason == delta.delta.stop_reason
    whole = aclient.messages.create(**kw)
    assert whole.content[0].text == text
    assert whole.usage.output_tokens == final.usage.output_tokens


def test_system_prompt(aclient):
    kw = dict(model=MODEL_ID, max_tokens=12, messages=HELLO, **GREEDY)
    plain = aclient.messages.create(system="You are a pirate. Speak like one.", **kw)
    blocks = aclient.messages.create(
        system=[{"type": "text", "text": "You are a pirate. "},
                {"type": "text", "text": "Speak like one."}], **kw)
    none = aclient.messages.create(**kw)
    assert plain.content[0].text == blocks.content[0].text
    assert plain.usage.input_tokens == blocks.usage.input_tokens
    # The system text reaches the prompt: it changes the token count (SmolLM2's template puts
    # its own default system message in when there is none).
    assert plain.usage.input_tokens != none.usage.input_tokens


def test_stop_sequences(aclient):
    kw = dict(model=MODEL_ID, max_tokens=24, messages=HELLO, **GREEDY)
    full = aclient.messages.create(**kw).content[0].text
    words = full.split()
    assert len(words) >= 4, full
    stop = " " + words[2]
    m = aclient.messages.create(stop_sequences=["@@never@@", stop], **kw)
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == stop
    text = m.content[0].text if m.content else ""
    assert full.startswith(text + stop), (full, text)


WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
# SmolLM2 answers this one with <tool_call> markup at temperature 0 (it is free not to).
ASK = [{"role": "user", "content": "Call get_weather for Paris."}]


def tool_uses(content):
    """The tool_use blocks of a message, checked: Anthropic-style ids, an offered name, an
    object input; no call markup left in the text blocks."""
    uses = [b for b in content if b.type == "tool_use"]
    for b in uses:
        assert b.id.startswith("toolu_") and len(b.id) > 10
        assert b.name == "get_weather"
        assert isinstance(b.input, dict)
    for b in content:
        if b.type == "text":
            assert "<tool_call>" not in b.text
    return uses


def test_tool_use_round_trip(aclient):
    kw = dict(model=MODEL_ID, max_tokens=200, messages=ASK, tools=[WEATHER], **GREEDY)
    m = aclient.messages.create(**kw)
    uses = tool_uses(m.content)
    assert (m.stop_reason == "tool_use") == bool(uses), (m.stop_reason, m.content)
    # Streamed, accumulated by the SDK's stream helper: the same calls and text.
    with aclient.messages.stream(**kw) as s:
        final = s.get_final_message()
    suses = tool_uses(final.content)
    assert [(b.name, b.input) for b in suses] == [(b.name, b.input) for b in uses]
    text = "".join(b.text for b in m.content if b.type == "text").strip()
    stext = "".join(b.text for b in final.content if b.type == "text").strip()
    assert stext == text
    assert final.stop_reason == m.stop_reason
    # The results go back as tool_result blocks (a call a client could have received when the
    # model made none); the conversation renders and the model answers.
    assistant = [b.model_dump(exclude_none=True) for b in m.content] if uses else [
        {"type": "tool_use", "id": "toolu_000000000001", "name": "get_weather",
         "input": {"city": "Paris"}}]
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "Sunny, 21 C"}
               for b in assistant if b["type"] == "tool_use"]
    follow = aclient.messages.create(
        model=MODEL_ID, max_tokens=24, tools=[WEATHER], **GREEDY,
        messages=ASK + [{"role": "assistant", "content": assistant},
                        {"role": "user", "content": results}])
    assert follow.type == "message" and follow.content
    assert follow.usage.input_tokens > m.usage.input_tokens


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_tool_choice_forces_a_call(aclient, choice):
    """tool_choice any / tool constrain decoding to a call (tool_choice required / named on the
    OpenAI side): the answer is a tool_use with an input that follows the schema."""
    time_tool = {"name": "get_time", "description": "The current time in a time zone",
                 "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}
    kw = dict(model=MODEL_ID, max_tokens=120, tools=[time_tool, WEATHER], tool_choice=choice,
              messages=[{"role": "user", "content": "What is the weather like in Paris?"}],
              **GREEDY)
    m = aclient.messages.create(**kw)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use", m.content
    assert uses and all(b.id.startswith("toolu_") for b in uses)
    if choice["type"] == "tool":
        assert all(b.name == "get_weather" for b in uses)
    for b in uses:
        assert b.name in ("get_time", "get_weather")
        if b.name == "get_weather":
            assert isinstance(b.input.get("city"), str)
    with aclient.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == \
        [(b.name, b.input) for b in uses]


def test_tool_history_renders(aclient):
    """An assistant tool_use block and the user's tool_result reach the template as a tool call
    and a tool message; the model then answers in text."""
    msgs = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 21 C"}]},
    ]
    m = aclient.messages.create(model=MODEL_ID, max_tokens=8, messages=msgs)
    assert m.content and m.content[0].type == "text"


def error_of(server, body, headers=None):
    status, r = server.json("POST", "/v1/messages", body, headers=headers)
    assert r["type"] == "error", r
    return status, r["error"]


@pytest.mark.parametrize("body,needle", [
    ({"messages": HELLO}, "max_tokens"),
    ({"max_tokens": 0, "messages": HELLO}, "max_tokens"),
    ({"max_tokens": 8, "messages": []}, "messages"),
    ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "role"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]},
     "image"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "video"),
    ({"max_tokens": 8, "messages": HELLO, "stop_sequences": ["a", "b", "c", "d", "e"]},
     "stop_sequences"),
    ({"max_tokens": 8, "messages": HELLO, "temperature": 7}, "temperature"),
    ({"max_tokens": 8, "messages": HELLO, "system": [{"type": "image"}]}, "image"),
    ({"max_tokens": 8, "messages": HELLO, "thinking": {"type": "enabled", "budget_tokens": 1024}},
     "thinking"),
    ({"max_tokens": 8, "messages": HELLO, "tool_choice": {"type": "any"}}, "tool_choice"),
    ({"max_tokens": 8, "messages": HELLO, "tools": [{"input_schema": {"type": "object"}}]},
     "name"),
    ({"max_tokens": 8, "messages": HELLO, "tools": [{"name": "f"}]}, "input_schema"),
    ({"max_tokens": 8, "messages": HELLO, "tools": [{"type": "web_search_20250305",
                                                     "name": "web_search"}]}, "web_search"),
    ({"max_tokens": 8, "messages": HELLO, "tools": [WEATHER],
      "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"max_tokens": 8, "messages": HELLO, "tools": [WEATHER], "tool_choice": {"type": "some"}},
     "tool_choice"),
    ({"max_tokens": 8, "messages": HELLO, "output_config": {"format": {"type": "json_schema",
                                                                     "schema": {}}}},
     "output_config"),
    ({"max_tokens": 8, "messages": HELLO, "top_k": 1.5}, "top_k"),
])
def test_bad_requests(server, body, needle):
    status, err = error_of(server, body)
    assert status == 400
    assert err["type"] == "invalid_request_error"
    assert needle in err["message"]


def test_bad_json_and_unknown_model(server, aclient):
    c = __import__("http.client").client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request("POST", "/v1/messages", body="{nope", headers={"Host": "127.0.0.1"})
    r = c.getresponse()
    assert r.status == 400
    assert b'"type":"error"' in r.read()
    with pytest.raises(anthropic.NotFoundError) as ei:
        aclient.messages.create(model="claude-nonexistent", max_tokens=4, messages=HELLO)
    assert ei.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as ei:
        aclient.messages.create(model=MODEL_ID, max_tokens=4, messages=HELLO,
                                stop_sequences=["1", "2", "3", "4", "5"])
    assert ei.value.body["error"]["type"] == "invalid_request_error"


def test_ignored_fields(aclient):
    m = aclient.messages.create(model=MODEL_ID, max_tokens=2, messages=HELLO,
                                metadata={"user_id": "someone"},
                                extra_body={"output_config": {"effort": "low"},
                                            "service_tier": "auto", "top_k": 40, "top_p": 0.9})
    assert m.usage.output_tokens == 2


def test_api_key(make_server):
    s = make_server("--api-key", "sekrit")
    good = anthropic.Anthropic(base_url=s.base, api_key="sekrit", max_retries=0)
    m = good.messages.create(model=MODEL_ID, max_tokens=2, messages=HELLO)
    assert m.usage.output_tokens == 2
    bad = anthropic.Anthropic(base_url=s.base, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as ei:
        bad.messages.create(model=MODEL_ID, max_tokens=2, messages=HELLO)
    assert ei.value.body["error"]["type"] == "authentication_error"


# ---- /v1/messages/count_tokens and the error shape of every path under /v1/messages ----------

def test_count_tokens_matches_the_prompt(aclient, server):
    """count_tokens renders and tokenizes what /v1/messages would: the same number as the
    message's usage.input_tokens, with system text and tools counted (they reach the prompt)."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny"}]}]
    for kw in (dict(messages=HELLO),
               dict(messages=HELLO, system="You are a pirate."),
               dict(messages=msgs, system=[{"type": "text", "text": "Be brief."}],
                    tools=[WEATHER])):
        counted = aclient.messages.count_tokens(model=MODEL_ID, **kw)
        m = aclient.messages.create(model=MODEL_ID, max_tokens=1, **kw)
        assert counted.input_tokens == m.usage.input_tokens > 5, kw
    plain = aclient.messages.count_tokens(model=MODEL_ID, messages=HELLO)
    with_tools = aclient.messages.count_tokens(model=MODEL_ID, messages=HELLO, tools=[WEATHER])
    assert with_tools.input_tokens > plain.input_tokens + 10
    # Raw: the body is exactly {"input_tokens": n}; max_tokens is not asked for.
    status, body = server.json("POST", "/v1/messages/count_tokens", {"messages": HELLO})
    assert status == 200 and body == {"input_tokens": plain.input_tokens}


def test_count_tokens_errors(aclient):
    with pytest.raises(anthropic.NotFoundError) as ei:
        aclient.messages.count_tokens(model="claude-nonexistent", messages=HELLO)
    assert ei.value.body["type"] == "error"
    assert ei.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as ei:
        aclient.messages.count_tokens(model=MODEL_ID, messages=[])
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    assert "messages" in ei.value.body["error"]["message"]


def test_unknown_path_under_messages_is_anthropic_404(aclient, server):
    # An Anthropic client parses the 404 of a path it expected to exist (count_tokens on an
    # older server, a batches call): Anthropic's shape, not OpenAI's.
    with pytest.raises(anthropic.NotFoundError) as ei:
        aclient.post("/v1/messages/batches", body={"requests": []}, cast_to=object)
    assert ei.value.body["type"] == "error"
    assert ei.value.body["error"]["type"] == "not_found_error"
    assert "/v1/messages/batches" in ei.value.body["error"]["message"]
    # Other paths keep OpenAI's shape.
    status, body = server.json("POST", "/v1/nope", {})
    assert status == 404 and body["error"]["code"] == "unknown_url"


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_wrong_method_is_anthropic_405(aclient, server, path):
    with pytest.raises(anthropic.APIStatusError) as ei:
        aclient.get(path, cast_to=object)
    assert ei.value.status_code == 405
    assert ei.value.body["type"] == "error"
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    assert ei.value.response.headers["allow"] == "POST, OPTIONS"


def test_body_too_large_is_anthropic_413(make_server):
    s = make_server("--max-body", "2000")
    c = anthropic.Anthropic(base_url=s.base, api_key="none", max_retries=0)
    big = [{"role": "user", "content": "x" * 4000}]
    for call in (lambda: c.messages.create(model=MODEL_ID, max_tokens=2, messages=big),
                 lambda: c.messages.count_tokens(model=MODEL_ID, messages=big)):
        with pytest.raises(anthropic.APIStatusError) as ei:
            call()
        assert ei.value.status_code == 413
        assert ei.value.body["type"] == "error"
        assert ei.value.body["error"]["type"] == "request_too_large"


def test_api_key_on_count_tokens(make_server):
    s = make_server("--api-key", "sekrit")
    good = anthropic.Anthropic(base_url=s.base, api_key="sekrit", max_retries=0)
    assert good.messages.count_tokens(model=MODEL_ID, messages=HELLO).input_tokens > 5
    bad = anthropic.Anthropic(base_url=s.base, api_key="wrong", max_retries=0)
    for call in (lambda: bad.messages.count_tokens(model=MODEL_ID, messages=HELLO),
                 lambda: bad.post("/v1/messages/nope", body={}, cast_to=object)):
        with pytest.raises(anthropic.AuthenticationError) as ei:
            call()
        assert ei.value.body["type"] == "error"
        assert ei.value.body["error"]["type"] == "authentication_error"
