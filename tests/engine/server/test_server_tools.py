"""Client-defined function calling on `wren serve`'s /v1/chat/completions, driven by the
official `openai` client over a scripted model that writes calls: the calls come back to
the client (Wren never runs them), blocking and streamed, the result sent back gets the
final answer, a named tool_choice is forced, a bad tool schema is a 400 naming the field.
Also: remote providers' models listed and served ("provider/model")."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from tests.engine.providers.fakeserver import FakeServer
from tests.engine.tools.test_turns import ForcedScripted

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Oslo?"}]


def run(coro):
    return asyncio.run(coro)


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key, max_retries=0, timeout=30)


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def by_round(*replies: str):
    """The n-th reply once n tool results are in the prompt (Wren's <tool_response> or a
    template's own tool message)."""

    def reply(prompt: str) -> str:
        n = prompt.count("<tool_response>")
        return replies[min(n, len(replies) - 1)]

    return reply


def test_blocking_call_goes_back_to_the_client_and_its_result_gets_the_answer(serving):
    async def main():
        reply = by_round("Let me check. " + call("get_weather", city="Oslo"), "It is 3 °C and cloudy in Oslo.")
        async with serving(reply) as s:
            api = client(s)
            first = await api.chat.completions.create(model="tiny", messages=QUESTION, tools=[WEATHER, TIME])
            message = first.choices[0].message
            follow = QUESTION + [message.model_dump(exclude_none=True), {
                "role": "tool", "tool_call_id": message.tool_calls[0].id, "content": '{"temp_c": 3, "sky": "cloudy"}'}]
            second = await api.chat.completions.create(model="tiny", messages=follow, tools=[WEATHER, TIME])
            prompts = s.engine.scripted.loaded[0].prompts
            return first, second, prompts, await s.engine.conversations.list()

    first, second, prompts, listed = run(main())
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check. "
    (tool_call,) = choice.message.tool_calls
    assert tool_call.type == "function" and tool_call.id.startswith("call_")
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Oslo"}
    # the tools reached the prompt (this template has no tools: Wren's own instructions)
    assert "get_weather" in prompts[0] and "get_time" in prompts[0] and "<tools>" in prompts[0]
    # the second request carried the call and its result, rendered for the model
    assert '"temp_c": 3' in prompts[1] and "<tool_response>" in prompts[1] and '"get_weather"' in prompts[1]
    assert second.choices[0].message.content == "It is 3 °C and cloudy in Oslo."
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls
    assert listed == []  # nothing stored, nothing run


def test_streamed_call_comes_as_tool_call_deltas(serving):
    async def main():
        async with serving(call("get_weather", city="Bergen")) as s:
            stream = await client(s).chat.completions.create(
                model="tiny", messages=QUESTION, tools=[WEATHER], stream=True,
                stream_options={"include_usage": True})
            return [c async for c in stream]

    chunks = run(main())
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == ""  # the call's text never shows as content
    parts = [t for d in deltas for t in (d.tool_calls or [])]
    assert parts[0].index == 0 and parts[0].id.startswith("call_") and parts[0].function.name == "get_weather"
    assert all(p.index == 0 for p in parts) and all(p.id is None for p in parts[1:])
    arguments = "".join(p.function.arguments or "" for p in parts)
    assert json.loads(arguments) == {"city": "Bergen"}
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["tool_calls"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 5


def test_named_tool_choice_forces_that_call(serving):
    async def main():
        # The model is given the forced call's opening in its prompt and writes only the arguments.
        backend = ForcedScripted('{"city": "Oslo"}}\n</tool_call>')
        async with serving(backend=backend) as s:
            api = client(s)
            forced = await api.chat.completions.create(
                model="tiny", messages=QUESTION, tools=[WEATHER, TIME],
                tool_choice={"type": "function", "function": {"name": "get_time"}})
            prompts = s.engine.scripted.loaded[0].prompts
            return forced, prompts

    forced, prompts = run(main())
    assert prompts[-1].endswith('<tool_call>\n{"name": "get_time", "arguments": ')
    choice = forced.choices[0]
    assert choice.finish_reason == "tool_calls"
    (made,) = choice.message.tool_calls
    assert made.function.name == "get_time" and json.loads(made.function.arguments) == {"city": "Oslo"}
    assert not choice.message.content


def test_tool_choice_none_and_plain_text_answers(serving):
    async def main():
        async with serving("Oslo is cold today.") as s:
            api = client(s)
            auto = await api.chat.completions.create(model="tiny", messages=QUESTION, tools=[WEATHER])
            none = await api.chat.completions.create(model="tiny", messages=QUESTION, tools=[WEATHER],
                                                     tool_choice="none")
            return auto, none, s.engine.scripted.loaded[0].prompts

    auto, none, prompts = run(main())
    assert auto.choices[0].message.content == "Oslo is cold today." and auto.choices[0].finish_reason == "stop"
    assert none.choices[0].message.content == "Oslo is cold today." and not none.choices[0].message.tool_calls
    assert "get_weather" in prompts[0] and "get_weather" not in prompts[1]  # "none" offers nothing


@pytest.mark.parametrize("tools, choice, param", [
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 5}}}],
     None, "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "bad name!"}}], None, "tools[0].function.name"),
    ([{"type": "retrieval"}], None, "tools[0].type"),
    ([WEATHER, WEATHER], None, "tools[1].function.name"),
    ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "tool_choice.function.name"),
    ([WEATHER], "sometimes", "tool_choice"),
    (None, "required", "tool_choice"),
])
def test_invalid_tools_are_a_400_naming_the_field(serving, tools, choice, param):
    async def main():
        async with serving("unused") as s:
            body = {"model": "tiny", "messages": QUESTION}
            if tools is not None:
                body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = choice
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers) as http:
                return await http.post("/v1/chat/completions", json=body)

    response = run(main())
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and param.split(".")[0].split("[")[0] in error["message"]


def test_bad_tool_messages_are_a_400(serving):
    async def main():
        async with serving("unused") as s:
            api = client(s)
            with pytest.raises(openai.BadRequestError) as orphan:
                await api.chat.completions.create(model="tiny", messages=QUESTION + [
                    {"role": "tool", "tool_call_id": "call_x", "content": "3"}])
            with pytest.raises(openai.BadRequestError) as broken:
                await api.chat.completions.create(model="tiny", messages=QUESTION + [
                    {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                          "function": {"name": "get_weather", "arguments": "{"}}]}])
            return orphan.value, broken.value

    orphan, broken = run(main())
    assert orphan.body["param"] == "messages[1].tool_call_id"
    assert broken.body["param"] == "messages[1].tool_calls[0].function.arguments"


# -- remote providers ---------------------------------------------------------------


@pytest.fixture
def fake_openai():
    s = FakeServer(default=("ok", "Hello from the remote side.")).start()
    yield s
    s.stop()


def test_remote_provider_models_are_listed_and_served(serving, fake_openai):
    async def main():
        async with serving("a local answer") as s:
            await s.engine.providers.add("fake", fake_openai.base_url, models=("fake-chat",))
            api = client(s)
            listed = await api.models.list()
            card = await api.models.retrieve("fake/fake-chat")
            answer = await api.chat.completions.create(
                model="fake/fake-chat", messages=[{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "What is up?"}])
            stream = await api.chat.completions.create(model="fake/fake-chat", messages=QUESTION, stream=True)
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return listed, card, answer, streamed

    listed, card, answer, streamed = run(main())
    assert [m.id for m in listed.data] == ["tiny", "fake/fake-chat"]
    assert card.owned_by == "fake"
    assert answer.model == "fake/fake-chat"
    assert answer.choices[0].message.content == "Hello from the remote side." == streamed
    assert answer.usage.completion_tokens > 0
    first = fake_openai.chats()[0].body
    assert first["model"] == "fake-chat"
    assert first["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is up?"}]


def test_a_blocked_word_in_a_calls_arguments_is_caught_before_the_model_reads_it(serving):
    """The client writes the history, calls included: a call's argument strings pass the
    same input policy as message text (here a blocklisted word)."""
    async def main():
        async with serving("It is 3 °C in Oslo.") as s:
            await s.engine.safety.set_blocklist(["pineapple"], [])
            history = QUESTION + [
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "pineapple town"})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 3}'}]
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
                blocked = await http.post("/v1/chat/completions", json={"messages": history, "tools": [WEATHER]})
                history[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"city": "Oslo"})
                fine = await http.post("/v1/chat/completions", json={"messages": history, "tools": [WEATHER]})
            return blocked, fine, s.engine.scripted.loaded[0].prompts

    blocked, fine, prompts = run(main())
    assert blocked.status_code == 200 and blocked.json()["choices"][0]["finish_reason"] == "content_filter"
    assert fine.json()["choices"][0]["finish_reason"] == "stop"
    assert not any("pineapple" in p for p in prompts)
    assert any('"Oslo"' in p for p in prompts)  # the clean call reached the model



def test_a_remote_providers_model_gets_the_clients_tools_as_text_and_its_call_comes_back(serving):
    """A remote model reads the offered tools as the engine's own loop gives them (the
    instructions, and earlier calls and results, in the chat's text); the call it writes is
    parsed from its answer and returned to the client as tool_calls, and the result the
    client sends back reaches the remote model."""
    remote = FakeServer(script=[("ok", "Checking. " + call("get_weather", city="Oslo"))],
                        default=("ok", "It is 3 °C in Oslo.")).start()

    async def main():
        async with serving("a local answer") as s:
            await s.engine.providers.add("fake", remote.base_url, models=("fake-chat",))
            api = client(s)
            first = await api.chat.completions.create(model="fake/fake-chat", messages=QUESTION, tools=[WEATHER])
            message = first.choices[0].message
            follow = QUESTION + [message.model_dump(exclude_none=True), {
                "role": "tool", "tool_call_id": message.tool_calls[0].id, "content": '{"temp_c": 3}'}]
            second = await api.chat.completions.create(model="fake/fake-chat", messages=follow, tools=[WEATHER])
            return first, second

    try:
        first, second = run(main())
        sent = [seen.body["messages"] for seen in remote.chats()]
    finally:
        remote.stop()
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking. "
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "get_weather" and json.loads(tool_call.function.arguments) == {"city": "Oslo"}
    assert second.choices[0].message.content == "It is 3 °C in Oslo."
    instructions = sent[0][0]
    assert instructions["role"] == "system" and "get_weather" in instructions["content"]
    assert sent[0][-1] == {"role": "user", "content": "What is the weather in Oslo?"}
    later = json.dumps(sent[1])
    assert "get_weather" in later and "temp_c" in later  # the call and its result went back
