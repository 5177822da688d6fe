"""OpenAI's Responses API (/v1/responses) against the real daemon with the official openai
client: text answers streamed and not (the SDK's responses.stream() accumulator against the
unstreamed answer), function tools over two turns through previous_response_id and through
explicit function_call/function_call_output items (the two must give the model the same
prompt), text.format json_schema, the store (GET, DELETE, 404s, its LRU bound), what is
refused, and reasoning output (<think> blocks as reasoning items here and as reasoning_content
in Chat Completions)."""
import json
import os

import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from conftest import MODEL_ID

WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}}
# A grammar that makes any model think first: the splitter's input, whatever the weights.
THINK = 'root ::= "<think>\\nThe user greets me.\\n</think>\\n\\nHello there!"'


def text_of(resp):
    return "".join(c.text for it in resp.output if it.type == "message" for c in it.content)


def test_text_answer(client):
    r = client.responses.create(model=MODEL_ID, input="Name a colour.", max_output_tokens=40,
                                temperature=0, instructions="Answer in one word.")
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert [it.type for it in r.output] == ["message"]
    m = r.output[0]
    assert m.role == "assistant" and m.id.startswith("msg_")
    assert r.output_text == m.content[0].text and r.output_text.strip()
    u = r.usage
    assert 0 < u.output_tokens <= 40
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0
    assert r.instructions == "Answer in one word."
    # The prompt is the chat prompt of the system message and the user's: the same greedy answer.
    c = client.chat.completions.create(
        model=MODEL_ID, max_tokens=40, temperature=0,
        messages=[{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Name a colour."}])
    assert c.usage.prompt_tokens == u.input_tokens
    assert c.choices[0].message.content == r.output_text


def test_length_limit_is_incomplete(client):
    r = client.responses.create(model=MODEL_ID, input="Tell me a long story about a cat.",
                                max_output_tokens=3, temperature=0)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    assert r.output[-1].status == "incomplete"


def test_stream_matches_non_stream(client, server):
    # An answer that ends on its own: responses.stream() finishes only on response.completed.
    kw = dict(model=MODEL_ID, input="Say hi.", max_output_tokens=200, temperature=0,
              extra_body={"seed": 3})
    whole = client.responses.create(**kw)
    with client.responses.stream(**kw) as stream:
        types = [ev.type for ev in stream]
        final = stream.get_final_response()
    assert final.output_text == whole.output_text
    assert [it.type for it in final.output] == ["message"]
    # A streamed response is stored as it was answered.
    assert client.responses.retrieve(final.id).output_text == final.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    done = "response.completed" if whole.status == "completed" else "response.incomplete"
    head = ["response.created", "response.in_progress", "response.output_item.added",
            "response.content_part.added"]
    tail = ["response.output_text.done", "response.content_part.done",
            "response.output_item.done", done]
    assert types[:4] == head and types[-4:] == tail, types
    assert set(types[4:-4]) == {"response.output_text.delta"}
    # create(stream=True): the raw events; the last one carries the whole response. The number of
    # deltas may differ between two requests (tokens generated while the connection's thread
    # was busy go out as one delta), so each stream's shape is checked on its own.
    events = list(client.responses.create(stream=True, **kw))
    etypes = [e.type for e in events]
    assert etypes[:4] == head and etypes[-4:] == tail, etypes
    assert set(etypes[4:-4]) == {"response.output_text.delta"}
    assert events[-1].response.output_text == whole.output_text
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        whole.output_text
    # Raw: each event names its type on an event: line too, and the sequence numbers run from 0.
    body = dict(kw, stream=True, seed=3)
    del body["extra_body"]
    status, hdrs, raw = server.request("POST", "/v1/responses", body)
    assert status == 200 and hdrs["content-type"] == "text/event-stream"
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == ""
    seq, rtypes, text = [], [], ""
    for b in blocks[:-1]:
        ev, data = b.split("\n")
        d = json.loads(data[len("data: "):])
        assert ev == "event: " + d["type"]
        seq.append(d["sequence_number"])
        rtypes.append(d["type"])
        text += d.get("delta", "") if d["type"] == "response.output_text.delta" else ""
    assert seq == list(range(len(seq)))
    assert rtypes[:4] == head and rtypes[-4:] == tail, rtypes
    assert text == whole.output_text


def check_call(resp):
    calls = [it for it in resp.output if it.type == "function_call"]
    assert calls, resp.output
    c = calls[0]
    assert c.name == "get_weather" and c.call_id.startswith("call_") and c.id.startswith("fc_")
    assert isinstance(json.loads(c.arguments)["city"], str)
    return c


def test_tools_two_turns_previous_response_id_and_items(client):
    ask = "What is the weather in Paris? Use the tool."
    kw = dict(model=MODEL_ID, tools=[WEATHER], temperature=0, max_output_tokens=60,
              parallel_tool_calls=False)
    r1 = client.responses.create(input=ask, tool_choice="required", **kw)
    call = check_call(r1)
    result = {"type": "function_call_output", "call_id": call.call_id,
              "output": "Sunny, 21 degrees"}
    # Turn two through the store.
    r2 = client.responses.create(previous_response_id=r1.id, input=[result], **kw)
    assert r2.previous_response_id == r1.id
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
    # Turn two with the whole conversation as items: the same prompt, so the same answer.
    items = [{"role": "user", "content": ask},
             *[it.model_dump(exclude_none=True) for it in r1.output], result]
    r3 = client.responses.create(input=items, **kw)
    assert r3.usage.input_tokens == r2.usage.input_tokens
    assert [(it.type, getattr(it, "arguments", None)) for it in r3.output] == \
        [(it.type, getattr(it, "arguments", None)) for it in r2.output]
    assert text_of(r3) == text_of(r2)
    # The tool result reached the prompt: a different result is a different prompt.
    other = dict(result, output="Heavy snow and a storm warning for the whole week")
    r4 = client.responses.create(previous_response_id=r1.id, input=[other], **kw)
    assert r4.usage.input_tokens > r2.usage.input_tokens


def test_tools_streamed(client):
    kw = dict(model=MODEL_ID, input="Weather in Oslo?", tools=[WEATHER], tool_choice="required",
              temperature=0, max_output_tokens=60, parallel_tool_calls=False)
    whole = client.responses.create(**kw)
    with client.responses.stream(**kw) as stream:
        types = [ev.type for ev in stream]
        final = stream.get_final_response()
    c = check_call(final)
    assert (c.call_id, c.arguments) != (None, None)
    assert json.loads(c.arguments) == json.loads(check_call(whole).arguments)
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    assert types[-1] == "response.completed"
    # A named tool choice.
    r = client.responses.create(model=MODEL_ID, input="Anything.", tools=[WEATHER],
                                tool_choice={"type": "function", "name": "get_weather"},
                                max_output_tokens=60, temperature=0)
    check_call(r)


CITY = {"type": "object", "properties": {"name": {"type": "string"},
                                         "population": {"type": "integer"}},
        "required": ["name", "population"], "additionalProperties": False}


def test_text_format_json_schema(client):
    r = client.responses.create(
        model=MODEL_ID, input="Describe Paris as JSON.", max_output_tokens=80, temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}})
    assert r.status == "completed", r.output_text
    jsonschema.validate(json.loads(r.output_text), CITY)
    assert r.text.format.type == "json_schema"
    r = client.responses.create(model=MODEL_ID, input="Give me a JSON object.",
                                max_output_tokens=60, temperature=0,
                                text={"format": {"type": "json_object"}})
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)
    else:
        assert r.output_text.startswith("{")


def test_store_get_delete_and_404(client, server):
    r = client.responses.create(model=MODEL_ID, input="Hi", max_output_tokens=5,
                                metadata={"k": "v"})
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.metadata == {"k": "v"}
    d = client.responses.delete(r.id)
    assert d is None or getattr(d, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    st, body = server.json("DELETE", f"/v1/responses/{r.id}")
    assert st == 404 and r.id in body["error"]["message"]
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.create(model=MODEL_ID, input="Hi", previous_response_id="resp_nope")
    assert "resp_nope" in str(ei.value) and ei.value.body["param"] == "previous_response_id"
    # store: false keeps nothing.
    r = client.responses.create(model=MODEL_ID, input="Hi", max_output_tokens=2, store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_store_is_bounded_lru(make_server):
    s = make_server("--responses-store", "2", "--ctx", "512")
    c = s.client()
    ids = [c.responses.create(model=MODEL_ID, input=f"Hi {i}", max_output_tokens=1).id
           for i in range(2)]
    c.responses.retrieve(ids[0])  # now the most recently used
    ids.append(c.responses.create(model=MODEL_ID, input="Hi 2", max_output_tokens=1).id)
    c.responses.retrieve(ids[0])
    c.responses.retrieve(ids[2])
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[1])
    s0 = make_server("--responses-store", "0", "--ctx", "512")
    r = s0.client().responses.create(model=MODEL_ID, input="Hi", max_output_tokens=1)
    with pytest.raises(openai.NotFoundError):
        s0.client().responses.retrieve(r.id)


@pytest.mark.parametrize("extra,param,words", [
    ({"tools": [{"type": "web_search"}]}, "tools", "web_search"),
    ({"tools": [WEATHER, {"type": "file_search", "vector_store_ids": ["v"]}]}, "tools",
     "file_search"),
    ({"background": True}, "background", "background"),
    ({"conversation": "conv_1"}, "conversation", "conversation"),
    ({"truncation": "auto"}, "truncation", "truncation"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input", "input_image"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "item_reference"),
    ({"input": []}, "input", "empty"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format", "yaml"),
    ({"text": {"format": {"type": "json_schema", "name": "x",
                          "schema": {"type": "object", "patternProperties": {"a": {}}}}}},
     "text.format.schema.patternProperties", "patternProperties"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", "web_search_preview"),
    ({"max_output_tokens": 0}, "max_output_tokens", "max_output_tokens"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort", "enable_thinking"),
])
def test_refused(client, extra, param, words):
    kw = dict(model=MODEL_ID, input="Hi", max_output_tokens=4)
    kw.update(extra)
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(**kw)
    assert ei.value.body["param"] == param, ei.value.body
    assert words in ei.value.body["message"], ei.value.body


def test_input_items_roles_and_parts(client):
    # developer and system roles, content as parts, output_text parts from an earlier turn.
    items = [{"role": "developer", "content": "Be brief."},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Hi"}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "user", "content": "Bye"}]
    r = client.responses.create(model=MODEL_ID, input=items, max_output_tokens=5)
    assert r.output and r.usage.input_tokens > 20


# ---- reasoning ------------------------------------------------------------------------------


def test_reasoning_items(client):
    kw = dict(model=MODEL_ID, input="Hi", max_output_tokens=60, extra_body={"grammar": THINK})
    r = client.responses.create(**kw)
    assert [it.type for it in r.output] == ["reasoning", "message"]
    rs = r.output[0]
    assert rs.id.startswith("rs_") and rs.content[0].type == "reasoning_text"
    assert rs.content[0].text == "The user greets me."
    assert r.output_text == "Hello there!"
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    with client.responses.stream(**kw) as stream:
        types = [ev.type for ev in stream]
        final = stream.get_final_response()
    assert [it.type for it in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "The user greets me."
    assert final.output_text == "Hello there!"
    assert "response.reasoning_text.delta" in types and "response.reasoning_text.done" in types
    # The reasoning goes back into the conversation of the next turn (as reasoning_content, which
    # SmolLM2's template does not print, so the prompt equals the one without it).
    r2 = client.responses.create(model=MODEL_ID, previous_response_id=r.id, input="And?",
                                 max_output_tokens=1)
    items = [{"role": "user", "content": "Hi"}, r.output[0].model_dump(exclude_none=True),
             {"role": "assistant", "content": "Hello there!"}, {"role": "user", "content": "And?"}]
    r3 = client.responses.create(model=MODEL_ID, input=items, max_output_tokens=1)
    assert r2.usage.input_tokens == r3.usage.input_tokens
    # reasoning_format none: the block stays in the text.
    r = client.responses.create(model=MODEL_ID, input="Hi", max_output_tokens=60,
                                extra_body={"grammar": THINK, "reasoning_format": "none"})
    assert [it.type for it in r.output] == ["message"]
    assert r.output_text.startswith("<think>")


def test_chat_reasoning_content(client):
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=60,
              extra_body={"grammar": THINK})
    m = client.chat.completions.create(**kw).choices[0].message
    assert m.content == "Hello there!"
    assert m.model_extra["reasoning_content"] == "The user greets me."
    reasoning, content = "", ""
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(stream=True, **kw):
        state.handle_chunk(chunk)
        for ch in chunk.choices:
            reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
            content += ch.delta.content or ""
            assert "<think" not in (ch.delta.content or "")
    assert reasoning == "The user greets me." and content == "Hello there!"
    assert state.get_final_completion().choices[0].message.content == "Hello there!"
    m = client.chat.completions.create(
        **dict(kw, extra_body={"grammar": THINK, "reasoning_format": "none"})).choices[0].message
    assert m.content.startswith("<think>") and "reasoning_content" not in (m.model_extra or {})
    # A model without thinking: no reasoning_content at all.
    m = client.chat.completions.create(model=MODEL_ID, messages=kw["messages"],
                                       max_tokens=5).choices[0].message
    assert "reasoning_content" not in (m.model_extra or {})
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL_ID, messages=kw["messages"], max_tokens=5,
                                       reasoning_effort="low")
    assert ei.value.body["param"] == "reasoning_effort"


# ---- reasoning effort on templates with enable_thinking -----------------------------------
# Tiny random-weight Qwen models (ebb-gen-model, as test_families.py makes them) with the real
# templates: Qwen3's closes an empty <think> block in the generation prompt when enable_thinking
# is false; this QwQ template opens the block when it is true (and closes it otherwise), so the
# answer then starts inside the reasoning.


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    import subprocess

    from conftest import Server
    from test_families import gen_model, template_path, vocab_path
    servers = {}
    for name, tmpl in (("qwen3", "Qwen-Qwen3-0.6B.jinja"), ("qwq", "Qwen-QwQ-32B.jinja")):
        vocab, t = vocab_path("ggml-vocab-qwen2.gguf"), template_path(tmpl)
        assert os.path.exists(vocab) and os.path.exists(t), "run scripts/fetch-vocabs.sh and " \
            "scripts/fetch-chat-templates.sh"
        model = str(tmp_path_factory.mktemp(name) / f"{name}.gguf")
        subprocess.run([gen_model(), "--shape", "qwen3-tiny", "--tokenizer-from", vocab,
                        "--type", "q8_0", "--seed", "7", "--chat-template", t, "-o", model],
                       check=True, capture_output=True)
        servers[name] = Server("--parallel", "1", "--ctx", "512", model=model)
    yield servers
    for s in servers.values():
        s.stop()


def qwen_model(server):
    return server.client().models.list().data[0].id


def test_effort_switches_thinking(qwen):
    s = qwen["qwen3"]
    c, model = s.client(), qwen_model(s)
    kw = dict(model=model, input="Hi", max_output_tokens=1)
    off = c.responses.create(reasoning={"effort": "none"}, **kw).usage.input_tokens
    on = c.responses.create(reasoning={"effort": "high"}, **kw).usage.input_tokens
    default = c.responses.create(**kw).usage.input_tokens
    # "<think>\n\n</think>\n\n" after the generation prompt when thinking is off.
    assert on == default and off > on
    # Chat Completions: reasoning_effort and chat_template_kwargs reach the same variable.
    msgs = [{"role": "user", "content": "Hi"}]
    cc = c.chat.completions.create(model=model, messages=msgs, max_tokens=1,
                                   reasoning_effort="minimal")
    assert cc.usage.prompt_tokens == off
    cc = c.chat.completions.create(model=model, messages=msgs, max_tokens=1,
                                   extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert cc.usage.prompt_tokens == off
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model=model, messages=msgs, max_tokens=1,
                                  extra_body={"chat_template_kwargs": {"messages": []}})
    assert ei.value.body["param"] == "chat_template_kwargs"


def test_prompt_opens_the_block(qwen):
    s = qwen["qwq"]
    c, model = s.client(), qwen_model(s)
    grammar = 'root ::= "I should greet back.\\n</think>\\n\\nHello!"'
    kw = dict(model=model, input="Hi", max_output_tokens=40, extra_body={"grammar": grammar})
    r = c.responses.create(reasoning={"effort": "medium"}, **kw)
    assert [it.type for it in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "I should greet back."
    assert r.output_text == "Hello!"
    with c.responses.stream(reasoning={"effort": "medium"}, **kw) as stream:
        final = stream.get_final_response()
    assert [it.type for it in final.output] == ["reasoning", "message"]
    assert final.output_text == "Hello!"
    # Thinking off: the template closed the block itself, so the same text is all answer.
    r = c.responses.create(reasoning={"effort": "none"}, **kw)
    assert [it.type for it in r.output] == ["message"]
    assert r.output_text.startswith("I should greet back.")
    m = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=40, reasoning_effort="high",
                                  extra_body={"grammar": grammar}).choices[0].message
    assert m.model_extra["reasoning_content"] == "I should greet back."
    assert m.content == "Hello!"
