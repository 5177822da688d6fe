"""Tool calling against the real daemon on SmolLM2 with the official openai client: calls in
the answer (non-stream, and streamed deltas accumulated the way the SDK's stream helpers do),
tool results in the history, and bad tool definitions."""
import json

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from conftest import MODEL_ID

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
TOOLS = [WEATHER, TIME]
# SmolLM2 answers this one with <tool_call> markup at temperature 0 (it is free not to).
ASK = [{"role": "user", "content": "Call get_weather for Paris."}]


def check_calls(message, finish_reason, tools=TOOLS):
    """The invariants of an answer: tool_calls well formed (ids unique, names offered,
    arguments a JSON object), finish_reason tool_calls exactly when there are calls, and no
    call markup left in the content."""
    names = {t["function"]["name"] for t in tools}
    calls = message.tool_calls or []
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        assert c.id.startswith("call_") and len(c.id) > 10
        assert c.type == "function"
        assert c.function.name in names
        assert isinstance(json.loads(c.function.arguments), dict)
    assert (finish_reason == "tool_calls") == bool(calls), (finish_reason, calls)
    if calls:
        assert "<tool_call>" not in (message.content or "")
    return calls


def test_auto_stream_matches_non_stream(client):
    # The same greedy request streamed and not: the SDK's accumulator (the state behind
    # client.chat.completions.stream) rebuilds from the deltas exactly the non-stream answer.
    kw = dict(model=MODEL_ID, messages=ASK, tools=TOOLS, max_tokens=200, temperature=0, seed=1)
    r = client.chat.completions.create(**kw)
    calls = check_calls(r.choices[0].message, r.choices[0].finish_reason)
    state = ChatCompletionStreamState()
    first_call_deltas = {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        state.handle_chunk(chunk)
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                if d.index not in first_call_deltas:
                    first_call_deltas[d.index] = d
            assert "<tool_call" not in (ch.delta.content or "")
    final = state.get_final_completion()
    m = final.choices[0].message
    got = check_calls(m, final.choices[0].finish_reason)
    assert [(c.function.name, c.function.arguments) for c in got] == \
        [(c.function.name, c.function.arguments) for c in calls]
    assert (m.content or "").strip() == (r.choices[0].message.content or "").strip()
    # The first delta of each call carries its index, id, type and name, arguments "".
    for i, d in first_call_deltas.items():
        assert d.id and d.id.startswith("call_") and d.type == "function"
        assert d.function.name and d.function.arguments == ""


def test_tool_result_round_trip(client):
    # A call the model made (or, if it made none, one a client could have sent), then its
    # result in the history: the conversation renders and the model answers in text.
    r = client.chat.completions.create(model=MODEL_ID, messages=ASK, tools=TOOLS,
                                       max_tokens=200, temperature=0)
    msg = r.choices[0].message
    calls = check_calls(msg, r.choices[0].finish_reason)
    if calls:
        assistant = msg.model_dump(exclude_none=True)
    else:
        assistant = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
    history = ASK + [assistant] + [
        {"role": "tool", "tool_call_id": c["id"], "content": "{\"temp_c\": 18, \"sky\": \"clear\"}"}
        for c in assistant["tool_calls"]]
    r2 = client.chat.completions.create(model=MODEL_ID, messages=history, tools=TOOLS,
                                        tool_choice="none", max_tokens=40, temperature=0)
    assert r2.choices[0].finish_reason in ("stop", "length")
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content
    # The tool results are in the prompt: it is longer than the conversation without them.
    r3 = client.chat.completions.create(model=MODEL_ID, messages=history[:-1] + [
        {"role": "tool", "tool_call_id": "x", "content": ""}], tools=TOOLS, tool_choice="none",
        max_tokens=1, temperature=0)
    assert r2.usage.prompt_tokens > r3.usage.prompt_tokens


def test_tools_reach_the_prompt(client):
    # SmolLM2's template knows no tools: the fallback describes them in the system message,
    # so the prompt grows with each tool, and "none" leaves them out.
    def prompt_tokens(**kw):
        return client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=1,
                                              temperature=0, **kw).usage.prompt_tokens
    plain = prompt_tokens()
    one = prompt_tokens(tools=[WEATHER])
    two = prompt_tokens(tools=TOOLS)
    assert plain < one < two
    assert prompt_tokens(tools=TOOLS, tool_choice="none") < one


@pytest.mark.parametrize("tools,extra,param,words", [
    ([{"type": "function", "function": {"description": "no name"}}], {}, "tools",
     "function.name is required"),
    ([{"type": "function", "function": {"name": "bad name!"}}], {}, "tools", "letters"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}], {},
     "tools", "parameters.type"),
    ([{"type": "function", "function": {"name": "f", "parameters": "object"}}], {}, "tools",
     "JSON schema object"),
    ([WEATHER, WEATHER], {}, "tools", "used twice"),
    ([{"type": "code_interpreter"}], {}, "tools", "'function'"),
    (TOOLS, {"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "not among 'tools'"),
    (TOOLS, {"tool_choice": "always"}, "tool_choice", "always"),
    (None, {"tool_choice": "required"}, "tool_choice", "no 'tools'"),
    (TOOLS, {"parallel_tool_calls": "yes"}, "parallel_tool_calls", "boolean"),
])
def test_bad_tool_definitions(server, client, tools, extra, param, words):
    kw = dict(extra)
    if tools is not None:
        kw["tools"] = tools
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=1, **kw)
    assert e.value.status_code == 400
    assert e.value.body["param"] == param
    assert words in e.value.body["message"]
    st, _, _ = server.request("GET", "/health")
    assert st == 200


def strict(tool):
    t = json.loads(json.dumps(tool))
    t["function"]["strict"] = True
    return t


def test_required_call_round_trip(client):
    # tool_choice "required": decoding is constrained to a call whose arguments follow the
    # tool's schema, so even SmolLM2 calls; then the result goes back and it answers in text.
    r = client.chat.completions.create(model=MODEL_ID, messages=[
        {"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
        tool_choice="required", parallel_tool_calls=False, max_tokens=100, temperature=0)
    ch = r.choices[0]
    calls = check_calls(ch.message, ch.finish_reason)
    assert len(calls) == 1 and ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    args = json.loads(calls[0].function.arguments)
    if calls[0].function.name == "get_weather":
        assert isinstance(args["city"], str)  # "city" is required by the schema
    history = [{"role": "user", "content": "What is the weather in Paris?"},
               ch.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": calls[0].id, "content": "18 C, clear"}]
    r2 = client.chat.completions.create(model=MODEL_ID, messages=history, tools=TOOLS,
                                        max_tokens=30, temperature=0)
    assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")
    check_calls(r2.choices[0].message, r2.choices[0].finish_reason)


def test_named_call_streamed_through_sdk_helper(client):
    # A named function, streamed, through client.chat.completions.stream (strict tools, so the
    # SDK parses each call's arguments itself): the events and the final completion agree.
    tools = [strict(WEATHER), strict(TIME)]
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "What time is it in UTC?"}],
              tools=tools, tool_choice={"type": "function", "function": {"name": "get_time"}},
              max_tokens=100, temperature=0)
    done_args = []
    with client.chat.completions.stream(**kw) as stream:
        for ev in stream:
            if ev.type == "tool_calls.function.arguments.done":
                assert ev.name == "get_time"
                done_args.append(ev.parsed_arguments)
            if ev.type == "content.delta":
                assert "<tool_call" not in ev.delta
        final = stream.get_final_completion()
    ch = final.choices[0]
    calls = check_calls(ch.message, ch.finish_reason, tools)
    assert [c.function.name for c in calls] == ["get_time"]
    assert calls[0].function.parsed_arguments == json.loads(calls[0].function.arguments)
    assert done_args == [calls[0].function.parsed_arguments]
    # The same request without streaming gives the same call.
    r = client.chat.completions.create(**kw)
    assert [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls] == \
        [(c.function.name, c.function.arguments) for c in calls]


def test_required_with_other_constraints_rejected(server):
    st, _, data = server.request("POST", "/v1/chat/completions", {
        "messages": ASK, "tools": TOOLS, "tool_choice": "required",
        "response_format": {"type": "json_object"}})
    assert st == 400, data
    assert json.loads(data)["error"]["param"] == "tool_choice"


def gbnf_literal(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.mark.parametrize("output,called", [
    # The model invents a tool next to the offered ones (issue 30: get_weather_args).
    ('<tool_call>\n{"name": "get_weather_args", "arguments": {"city": "Paris"}}\n</tool_call>',
     None),
    ('{"name": "search", "arguments": {"q": "Paris"}}', None),
    # The control: the same markup naming an offered tool is a call.
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "get_weather"),
])
def test_unknown_tool_stays_content(client, output, called):
    """Under tool_choice auto, a call to a tool that was not offered is never returned as a
    call: its markup stays in the content, finish_reason stays "stop". The model's answer is
    pinned with a grammar (SmolLM2's template has no tools: the Hermes fallback format)."""
    kw = dict(model=MODEL_ID, messages=ASK, tools=TOOLS, max_tokens=60, temperature=0,
              extra_body={"grammar": "root ::= " + gbnf_literal(output)})
    r = client.chat.completions.create(**kw)
    m, finish = r.choices[0].message, r.choices[0].finish_reason
    check_calls(m, finish)
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(stream=True, **kw):
        state.handle_chunk(chunk)
    final = state.get_final_completion().choices[0]
    check_calls(final.message, final.finish_reason)
    if called:
        assert [c.function.name for c in m.tool_calls] == [called]
        assert [c.function.name for c in final.message.tool_calls] == [called]
    else:
        assert not m.tool_calls and finish == "stop"
        assert m.content == output
        assert not final.message.tool_calls and final.finish_reason == "stop"
        assert final.message.content == output
