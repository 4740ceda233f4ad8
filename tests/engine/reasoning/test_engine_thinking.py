"""A thinking model's answer through the whole engine (scripted backend, real Qwen3 and
DeepSeek-R1 distill templates): Reasoning events apart from Delta, the thinking stored
apart, left out of the next turn's prompt, counted apart in Usage."""

from __future__ import annotations

import asyncio

from wren.engine.events import Delta, Finished, FinishReason, Reasoning, Usage
from wren.engine.inference.reasoning import STOPPED_NOTE
from wren.engine.records import MessageStatus

from .conftest import R1_DISTILL


async def collect(stream) -> list:
    return [event async for event in stream]


def shown(events, kind) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def test_qwen3_thinking_streams_apart_is_stored_apart_and_left_out_of_the_next_prompt(thinking_engine):
    async def main():
        engine = thinking_engine("<think>\nThe capital of France is Paris.\n</think>\n\nParis.")
        conv = await engine.conversations.create("q")
        first = await collect(engine.chat.send(conv.id, "What is the capital of France?"))
        second = await collect(engine.chat.send(conv.id, "And of Italy?"))
        messages = await engine.conversations.messages(conv.id)
        prompts = list(engine.scripted.loaded[0].prompts)
        await engine.close()
        return first, second, messages, prompts

    first, second, messages, prompts = asyncio.run(main())
    assert shown(first, Reasoning) == "The capital of France is Paris.\n"
    assert shown(first, Delta) == "Paris."
    assert "<think>" not in shown(first, Delta) and "think>" not in shown(first, Delta)
    kinds = [type(e) for e in first if isinstance(e, (Reasoning, Delta))]
    assert kinds.index(Delta) > max(i for i, k in enumerate(kinds) if k is Reasoning)  # thinking first
    answer = messages[1]
    assert answer.content == "Paris." and answer.status is MessageStatus.COMPLETE
    assert answer.reasoning == "The capital of France is Paris."
    assert answer.reasoning_seconds is not None and answer.reasoning_seconds >= 0
    usage = next(e for e in first if isinstance(e, Usage))
    assert 0 < usage.reasoning_tokens < usage.completion_tokens
    # the second question's prompt has the first answer, not its thinking
    assert "Paris." in prompts[1] and "The capital of France is Paris" not in prompts[1]
    assert isinstance(second[-1], Finished) and second[-1].reason is FinishReason.STOP


def test_r1_distill_prompt_opens_thinking_so_the_answer_starts_inside_it(thinking_engine):
    async def main():
        engine = thinking_engine("Two plus two is four.\n</think>\n\n4", R1_DISTILL, arch="qwen2")
        conv = await engine.conversations.create("q")
        events = await collect(engine.chat.send(conv.id, "2+2?"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        prompt = engine.scripted.loaded[0].prompts[0]
        await engine.close()
        return events, answer, prompt

    events, answer, prompt = asyncio.run(main())
    assert prompt.endswith("<｜Assistant｜><think>\n")  # the template opened it
    assert shown(events, Reasoning) == "Two plus two is four.\n"
    assert shown(events, Delta) == "4"
    assert answer.content == "4" and answer.reasoning == "Two plus two is four."


def test_thinking_never_closed_is_kept_as_thinking_and_the_answer_says_so(thinking_engine):
    async def main():
        engine = thinking_engine("<think>\nLet me count the letters one by one")
        conv = await engine.conversations.create("q")
        events = await collect(engine.chat.send(conv.id, "How many r in strawberry?"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return events, answer

    events, answer = asyncio.run(main())
    assert shown(events, Reasoning) == "Let me count the letters one by one"
    assert shown(events, Delta) == STOPPED_NOTE
    assert answer.content == STOPPED_NOTE
    assert answer.reasoning == "Let me count the letters one by one"


def test_a_model_without_thinking_is_unchanged(make_engine):
    async def main():
        engine = make_engine("Plain <think>words</think> answer.")
        conv = await engine.conversations.create("q")
        events = await collect(engine.chat.send(conv.id, "hi"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return events, answer

    events, answer = asyncio.run(main())
    assert not any(isinstance(e, Reasoning) for e in events)
    assert answer.content == "Plain <think>words</think> answer." and answer.reasoning == ""
    assert answer.reasoning_seconds is None
    assert next(e for e in events if isinstance(e, Usage)).reasoning_tokens == 0


def test_a_chats_thinking_setting_reaches_the_template_and_a_send_may_override_it(thinking_engine):
    import pytest

    from wren.engine.errors import InvalidRequest
    from wren.engine.records import SendOptions, ThinkingSupport

    async def main():
        engine = thinking_engine("Paris.")
        await engine.models.load()
        support = engine.models.thinking()
        conv = await engine.conversations.create("q")
        settings = await engine.conversations.update_settings(conv.id, thinking="off")
        await collect(engine.chat.send(conv.id, "Capital of France?"))
        await collect(engine.chat.send(conv.id, "And Italy?", SendOptions(thinking="on")))
        with pytest.raises(InvalidRequest, match="thinking setting must be one of on, off, low, medium, high"):
            await engine.conversations.update_settings(conv.id, thinking="maybe")
        with pytest.raises(InvalidRequest, match="SendOptions.thinking"):
            SendOptions(thinking="loud")
        prompts = list(engine.scripted.loaded[0].prompts)
        kept = (await engine.conversations.settings(conv.id))["thinking"]
        await engine.close()
        return support, settings, prompts, kept

    support, settings, prompts, kept = asyncio.run(main())
    assert support == ThinkingSupport(True, ("on", "off"))
    assert settings["thinking"] == "off" and kept == "off"  # the bad value changed nothing
    assert prompts[0].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # off: Qwen3's empty thinking
    assert prompts[1].endswith("And Italy?<|im_end|>\n<|im_start|>assistant\n")  # this Send: on


def test_a_model_without_thinking_offers_no_choice(make_engine):
    from wren.engine.records import ThinkingSupport

    async def main():
        engine = make_engine("hi")
        before = engine.models.thinking()
        await engine.models.load()
        support = engine.models.thinking()
        await engine.close()
        return before, support

    before, support = asyncio.run(main())
    assert before is None and support == ThinkingSupport(False, ())


def test_the_next_answers_context_report_shows_the_thinking_left_out_and_exports_keep_it(thinking_engine):
    import json

    from wren.engine.context.report import PartKind, PartState

    async def main():
        engine = thinking_engine("<think>\nRecall the capitals.\n</think>\n\nParis.")
        conv = await engine.conversations.create("q")
        await collect(engine.chat.send(conv.id, "Capital of France?"))
        await collect(engine.chat.send(conv.id, "And of Italy?"))
        messages = await engine.conversations.messages(conv.id)
        report = await engine.conversations.context_report(messages[-1].id)
        as_json = json.loads(await engine.conversations.export(conv.id, "json"))
        as_markdown = await engine.conversations.export(conv.id, "markdown")
        await engine.close()
        return messages, report, as_json, as_markdown

    messages, report, as_json, as_markdown = asyncio.run(main())
    first_answer = messages[1]
    thinking = report.parts_of(PartKind.THINKING)
    assert [(p.state, p.source_ids) for p in thinking] == [(PartState.DROPPED, (first_answer.id,))]
    assert thinking[0].tokens > 0 and "not sent back" in thinking[0].note
    assert "Recall the capitals" not in report.rendered_prompt
    exported = {m["id"]: m for m in as_json["messages"]}
    assert exported[first_answer.id]["reasoning"] == "Recall the capitals."
    assert exported[first_answer.id]["content"] == "Paris."
    assert "reasoning" not in exported[messages[0].id]  # a question has none
    assert "<details><summary>Thought for 0 s</summary>\n\nRecall the capitals.\n\n</details>" in as_markdown


def test_log_probabilities_cover_the_answer_not_the_thinking(thinking_engine):
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.records import SendOptions

    async def main():
        engine = thinking_engine("<think>\nA long thought here.\n</think>\n\nParis.")
        conv = await engine.conversations.create("q")
        options = SendOptions(sampling=SamplingParams(temperature=0.0, logprobs=2))
        events = await collect(engine.chat.send(conv.id, "Capital?", options))
        await engine.close()
        return events

    events = asyncio.run(main())
    deltas = [e for e in events if isinstance(e, Delta)]
    tokens = "".join(t.token for d in deltas for t in d.logprobs or ())
    assert "".join(d.text for d in deltas) == "Paris."
    assert "thought" not in tokens and tokens.endswith("Paris.")


def test_a_new_chats_title_request_asks_the_model_not_to_think(thinking_engine):
    def reply(prompt: str) -> str:
        if "title" in prompt.lower() and prompt.endswith("<think>\n\n</think>\n\n"):
            return "Capitals of Europe"
        return "<think>\nRecall.\n</think>\n\nParis is the capital of France."

    async def main():
        engine = thinking_engine(reply)
        await engine.settings.set("titles.model", "always")
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "What is the capital of France?"))
        title = (await engine.conversations.get(conv.id)).title
        prompts = list(engine.scripted.loaded[0].prompts)
        await engine.close()
        return title, prompts

    title, prompts = asyncio.run(main())
    assert title == "Capitals of Europe"
    assert any(p.endswith("<think>\n\n</think>\n\n") for p in prompts)  # the title's request, thinking off


def test_smollm3_thinks_in_tags_and_its_no_think_mode_comes_from_the_chat(thinking_engine):
    from .conftest import SMOLLM3

    async def main():
        engine = thinking_engine("<think>\nA greeting.\n</think>\nHi!", SMOLLM3, arch="qwen2")
        conv = await engine.conversations.create("q")
        first = await collect(engine.chat.send(conv.id, "hello"))
        await engine.conversations.update_settings(conv.id, thinking="off")
        await collect(engine.chat.send(conv.id, "again"))
        prompts = list(engine.scripted.loaded[0].prompts)
        await engine.close()
        return first, prompts

    first, prompts = asyncio.run(main())
    assert shown(first, Reasoning) == "A greeting.\n" and shown(first, Delta) == "Hi!"
    assert "Reasoning Mode: /think" in prompts[0]
    assert "Reasoning Mode: /no_think" in prompts[1] and prompts[1].endswith("<think>\n\n</think>\n")
    assert "A greeting" not in prompts[1]


def test_continuing_an_r1_answer_goes_on_as_answer_text_not_thinking(thinking_engine):
    """The R1 prompt opens <think>; a stopped answer continued goes on after its text, which
    is past the thinking: what comes is answer text (it was read as thinking before)."""
    async def main():
        engine = thinking_engine("Sum.\n</think>\n\nFour and a lot more words to come after it.", R1_DISTILL,
                                 arch="qwen2", delay=0.005)
        conv = await engine.conversations.create("q")
        async for event in engine.chat.send(conv.id, "2+2?"):
            if isinstance(event, Delta):
                engine.chat.stop(conv.id)  # stopped once the answer's text began
        cut = (await engine.conversations.messages(conv.id))[-1]
        events = await collect(engine.chat.continue_answer(cut.id))
        after = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return cut, events, after

    cut, events, after = asyncio.run(main())
    assert cut.content and "Four".startswith(cut.content[:4]) and cut.reasoning == "Sum."
    assert not any(isinstance(e, Reasoning) for e in events)
    assert after.content == "Four and a lot more words to come after it."
    assert after.reasoning == "Sum."  # the continuation thought nothing new


def test_an_answer_stopped_while_thinking_goes_on_thinking_when_continued(thinking_engine):
    async def main():
        engine = thinking_engine("<think>\nFirst I add two and two, which makes four, so the answer is clear."
                                 "\n</think>\n\nFour.", delay=0.005)
        conv = await engine.conversations.create("q")
        async for event in engine.chat.send(conv.id, "2+2?"):
            if isinstance(event, Reasoning):
                engine.chat.stop(conv.id)  # stopped while it thought
        cut = (await engine.conversations.messages(conv.id))[-1]
        events = await collect(engine.chat.continue_answer(cut.id))
        after = (await engine.conversations.messages(conv.id))[-1]
        prompt = engine.scripted.loaded[0].prompts[-1]
        await engine.close()
        return cut, events, after, prompt

    cut, events, after, prompt = asyncio.run(main())
    assert cut.content == "" and cut.reasoning and "First I add".startswith(cut.reasoning[:5])
    assert shown(events, Delta) == "Four."
    assert after.content == "Four."
    assert after.reasoning == "First I add two and two, which makes four, so the answer is clear."
