"""Conversations the OpenAI API accepts reach templates that demand alternating roles (issue 30):
two assistant messages in a row (openai-agents sends an assistant's text and its tool call as
two), two user messages, a late system message. Gemma 3 270M's own template and the built-in
gemma and mistral families raise on those shapes; ebb merges consecutive messages of one role
before such a template sees them, so the request answers as the merged conversation would.
Through the official openai client."""
import os

import pytest

from conftest import models_dir

GEMMA = "gemma-3-270m-q4_k_m.gguf"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = {"id": "call_abc123", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}

# (as sent, the same conversation merged by hand, tools)
CASES = {
    # openai-agents: a turn with text and a tool call comes back as two assistant messages.
    "agents-tool-turn": (
        [{"role": "system", "content": "You are helpful."},
         {"role": "user", "content": "What is the weather in Paris?"},
         {"role": "assistant", "content": "Let me check."},
         {"role": "assistant", "content": None, "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_abc123", "content": "Sunny, 21 C"}],
        [{"role": "system", "content": "You are helpful."},
         {"role": "user", "content": "What is the weather in Paris?"},
         # Texts are joined by a blank line; these templates know no tools, so the call is
         # written as <tool_call> markup on a new line after the text (docs/API.md): the same
         # prompt as one message whose text ends in a newline.
         {"role": "assistant", "content": "Let me check.\n", "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_abc123", "content": "Sunny, 21 C"}],
        [WEATHER]),
    "two-assistant-two-user": (
        [{"role": "user", "content": "Hi."},
         {"role": "assistant", "content": "Hello!"},
         {"role": "assistant", "content": "How can I help?"},
         {"role": "user", "content": "Tell me a colour."},
         {"role": "user", "content": "Just one word."}],
        [{"role": "user", "content": "Hi."},
         {"role": "assistant", "content": "Hello!\n\nHow can I help?"},
         {"role": "user", "content": "Tell me a colour.\n\nJust one word."}],
        None),
    "late-system": (
        [{"role": "user", "content": "Hi."},
         {"role": "assistant", "content": "Hello!"},
         {"role": "system", "content": "Answer in French."},
         {"role": "user", "content": "Tell me a colour."}],
        [{"role": "user", "content": "Hi."},
         {"role": "assistant", "content": "Hello!"},
         {"role": "user", "content": "Answer in French.\n\nTell me a colour."}],
        None),
}


@pytest.fixture(scope="module", params=["gemma3-own", "builtin-gemma", "builtin-mistral"])
def strict(request):
    """A server whose template demands alternation: Gemma 3 270M with its own Jinja template,
    or SmolLM2 under the built-in gemma or mistral family."""
    from conftest import Server
    if request.param == "gemma3-own":
        model = os.path.join(models_dir(), GEMMA)
        s = Server("--ctx", "1024", model=model)
    else:
        s = Server("--ctx", "1024", "--chat-template", request.param.split("-")[1])
    yield s
    s.stop()


@pytest.mark.parametrize("case", sorted(CASES))
def test_consecutive_roles_are_merged(strict, case):
    sent, merged, tools = CASES[case]
    c = strict.client()
    kw = dict(model="", max_tokens=8, temperature=0, seed=1)
    if tools:
        kw["tools"] = tools
    got = c.chat.completions.create(messages=sent, **kw)
    want = c.chat.completions.create(messages=merged, **kw)
    # The same prompt (its length, the greedy answer) as the conversation merged by hand.
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    assert got.choices[0].message.content == want.choices[0].message.content
    assert got.choices[0].finish_reason == want.choices[0].finish_reason


def test_strict_template_still_raises_on_what_merging_cannot_fix(strict):
    # Consecutive tool results stay as they are (templates expect runs of them); a role no API
    # has is still a 400 naming the conversation.
    st, body = strict.json("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}],
        "max_tokens": 2})
    assert st == 400, body
    assert body["error"]["param"] == "messages"
