"""openai-agents with its default model, OpenAIResponsesModel (the Responses API), against the
real daemon on SmolLM2: a tool loop over several turns (the model calls the function tool, the
SDK runs it and sends its output back as function_call_output items, the model answers), run
both unstreamed and streamed, and a follow-up run chained by previous_response_id. SmolLM2 is
too small to decide on tools by itself, so the first turn is forced with tool_choice
"required"; the SDK resets the choice to auto once the tool has run (reset_tool_choice), which
is what lets the loop end."""
import asyncio

# openai-agents is in requirements.txt: missing, it is a failure, not a skip.
from agents import (Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool,
                    set_tracing_disabled)
from agents.items import ToolCallItem, ToolCallOutputItem
from openai import AsyncOpenAI

from conftest import MODEL_ID

set_tracing_disabled(True)  # no trace export: nothing outside the machine is reachable


def make_agent(server, calls):
    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"It is sunny and 21 degrees in {city}."

    client = AsyncOpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
    model = OpenAIResponsesModel(model=MODEL_ID, openai_client=client)
    return Agent(name="weather", instructions="You answer questions about the weather.",
                 model=model, tools=[get_weather],
                 model_settings=ModelSettings(tool_choice="required", temperature=0,
                                              max_tokens=80, parallel_tool_calls=False))


def check_run(result, calls):
    # The tool ran with what the model asked for, and its output went back to the model.
    assert calls and all(isinstance(c, str) and c for c in calls)
    kinds = [type(i) for i in result.new_items]
    assert ToolCallItem in kinds and ToolCallOutputItem in kinds
    outputs = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert outputs[0] == f"It is sunny and 21 degrees in {calls[0]}."
    # At least two model turns: the call, then an answer after the tool's output.
    assert len(result.raw_responses) >= 2
    first = result.raw_responses[0]
    assert [o.type for o in first.output] == ["function_call"]
    last = result.raw_responses[-1]
    assert all(o.type != "function_call" for o in last.output)
    assert isinstance(result.final_output, str)
    assert result.final_output == "".join(
        c.text for o in last.output if o.type == "message" for c in o.content)
    # The second turn's prompt held the first one's call and the tool's output.
    assert result.raw_responses[1].usage.input_tokens > \
        first.usage.input_tokens + first.usage.output_tokens
    return last


def test_agent_tool_loop(server):
    calls = []
    agent = make_agent(server, calls)
    plain = agent.clone(model_settings=ModelSettings(temperature=0, max_tokens=20))

    async def run():
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=6)
        # A follow-up turn chained on the server's store instead of resending the history.
        follow = await Runner.run(plain, "Thanks!", previous_response_id=result.last_response_id,
                                  max_turns=2)
        return result, follow

    result, follow = asyncio.run(run())
    last = check_run(result, calls)
    assert last.response_id == result.last_response_id
    status, stored = server.json("GET", f"/v1/responses/{follow.last_response_id}")
    assert status == 200 and stored["previous_response_id"] == last.response_id
    assert follow.raw_responses[0].usage.input_tokens > \
        last.usage.input_tokens + last.usage.output_tokens


def test_agent_tool_loop_streamed(server):
    calls = []
    agent = make_agent(server, calls)

    async def run():
        result = Runner.run_streamed(agent, "What is the weather in Oslo?", max_turns=6)
        kinds = set()
        async for ev in result.stream_events():
            kinds.add(ev.type)
        return result, kinds

    result, kinds = asyncio.run(run())
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    check_run(result, calls)
