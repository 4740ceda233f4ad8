"""Real chat templates of thinking families (tests/data/templates/, from llama.cpp's
models/templates/) rendered in Wren's sandbox: the thinking choice reaches the prompt as
the template's own variable, the prompt says whether the answer starts inside <think>,
earlier answers go back without their thinking, and the family's stop tokens end an answer
(gpt-oss's <|end|> only ends its thinking)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wren.engine.inference.families.family import ReasoningFormat
from wren.engine.inference.reasoning import opens_thinking, reasoning_format
from wren.engine.tokenize import StreamingDetokenizer, Tokenizer
from wren.engine.turn.thinking import EFFORT, SWITCH, control_of, template_vars

from .conftest import GPT_OSS, QWEN3, R1_DISTILL, SMOLLM3, template

CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},  # stored apart from its thinking
        {"role": "user", "content": "And of Italy?"}]
HARMONY_TOKENS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"]


@pytest.fixture
def tokenizer_with(tmp_path: Path):
    """A Tokenizer over the tiny BPE with a real template (and, for gpt-oss, harmony's
    special tokens and its eos as its files give them)."""
    from tests.fixtures.tiny import train_tiny_tokenizer

    def make(name: str, special: list[str] = (), eos: str = "<|im_end|>",
             generation_eos: tuple[str, ...] = ("<|return|>", "<|endoftext|>", "<|call|>")) -> Tokenizer:
        tok = train_tiny_tokenizer()
        tok.add_special_tokens(list(special))
        folder = tmp_path / name
        folder.mkdir()
        tok.save(str(folder / "tokenizer.json"))
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *special]
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "chat_template": template(name), "eos_token": eos, "bos_token": None,
            "added_tokens_decoder": {str(tok.token_to_id(t)): {"content": t, "special": True} for t in specials}}))
        if special:
            ids = [tok.token_to_id(t) for t in generation_eos]
            (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": ids}))
        return Tokenizer.from_dir(folder)

    return make


def render(tok: Tokenizer, choice: str | None) -> str:
    return tok.with_template_vars(**template_vars(choice, tok.chat_template)).render_chat(CHAT)


def test_qwen3_enable_thinking_off_closes_an_empty_think_in_the_prompt(tokenizer_with):
    tok = tokenizer_with(QWEN3)
    assert reasoning_format(None, tok.chat_template) is ReasoningFormat.THINK_TAGS
    assert control_of(tok.chat_template) == SWITCH
    on, off, default = render(tok, "on"), render(tok, "off"), render(tok, None)
    assert on == default and on.endswith("<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n")
    assert off == on + "<think>\n\n</think>\n\n"
    assert not opens_thinking(on) and not opens_thinking(off)
    assert "<|im_start|>assistant\nParis.<|im_end|>" in on  # the earlier answer, no thinking
    assert tok._id("<|im_end|>") in tok.eos_ids  # <|im_end|> ends the answer


def test_qwen3_template_strips_thinking_left_in_an_earlier_answer_itself(tokenizer_with):
    tok = tokenizer_with(QWEN3)
    chat = [*CHAT[:2], {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nParis."}, CHAT[3]]
    assert "hmm" not in tok.render_chat(chat)


def test_r1_distill_opens_think_in_the_prompt_and_takes_no_switch(tokenizer_with):
    tok = tokenizer_with(R1_DISTILL)
    prompt = render(tok, "off")  # no variable to set: the choice changes nothing
    assert prompt == render(tok, None)
    assert prompt.endswith("<｜User｜>And of Italy?<｜Assistant｜><think>\n")
    assert opens_thinking(prompt)
    assert reasoning_format(None, tok.chat_template) is ReasoningFormat.THINK_TAGS
    assert control_of(tok.chat_template) == ()
    assert "<｜Assistant｜>Paris.<｜end▁of▁sentence｜>" in prompt


def test_smollm3_no_think_mode_from_the_switch(tokenizer_with):
    tok = tokenizer_with(SMOLLM3)
    assert control_of(tok.chat_template) == SWITCH
    on, off = render(tok, "on"), render(tok, "off")
    assert "Reasoning Mode: /think" in on and on.endswith("<|im_start|>assistant\n")
    assert "Reasoning Mode: /no_think" in off and off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n")
    assert not opens_thinking(off)
    assert reasoning_format(None, tok.chat_template) is ReasoningFormat.THINK_TAGS


def test_gpt_oss_reasoning_effort_and_its_stop_tokens(tokenizer_with):
    tok = tokenizer_with(GPT_OSS, HARMONY_TOKENS, eos="<|return|>")
    assert reasoning_format(None, tok.chat_template) is ReasoningFormat.HARMONY
    assert control_of(tok.chat_template) == EFFORT
    for effort in EFFORT:
        assert f"Reasoning: {effort}\n" in render(tok, effort)
    assert "Reasoning: medium\n" in render(tok, None)  # the template's default
    prompt = render(tok, "low")
    assert prompt.endswith("<|start|>user<|message|>And of Italy?<|end|><|start|>assistant")
    assert "<|start|>assistant<|channel|>final<|message|>Paris.<|end|>" in prompt
    # <|return|> and <|call|> end an answer; <|end|> ends only the thinking message
    ids = {t: tok._id(t) for t in HARMONY_TOKENS}
    assert {ids["<|return|>"], ids["<|call|>"]} <= tok.eos_ids
    assert ids["<|end|>"] not in tok.eos_ids


def test_gpt_oss_markers_survive_the_streaming_detokenizer(tokenizer_with):
    tok = tokenizer_with(GPT_OSS, HARMONY_TOKENS, eos="<|return|>")
    text = "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!"
    ids = tok.encode(text, special=True)
    assert tok._id("<|channel|>") in ids  # the markers are single special tokens
    detok = StreamingDetokenizer(tok)
    out = "".join(detok.feed(i) for i in ids) + detok.flush()
    assert out == text


def test_a_template_without_thinking_keeps_special_tokens_out_of_the_stream(tokenizer_with, tmp_path):
    from tests.fixtures.tiny import CHAT_TEMPLATE, train_tiny_tokenizer

    folder = tmp_path / "plain"
    folder.mkdir()
    train_tiny_tokenizer().save(str(folder / "tokenizer.json"))
    tok0 = Tokenizer.from_dir(folder, chat_template=CHAT_TEMPLATE)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>",
        "added_tokens_decoder": {str(tok0._id(t)): {"content": t, "special": True}
                                 for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}}))
    tok = Tokenizer.from_dir(folder)
    assert tok.marker_ids == frozenset() and control_of(tok.chat_template) == ()
    detok = StreamingDetokenizer(tok)
    ids = tok.encode("<|im_start|>Hi", special=True)
    assert "".join(detok.feed(i) for i in ids) + detok.flush() == "Hi"


def generated(tok: Tokenizer, text: str) -> tuple[str, object]:
    """What the worker's output step makes of a model writing `text` (its markup as the
    tokenizer's special tokens): the streamed text, and why it stopped."""
    from wren.engine.events import Delta
    from wren.engine.inference.output import SequenceOutput
    from wren.engine.inference.requests import GenerationRequest
    from wren.engine.inference.sampling import SamplingParams

    events: list = []
    out = SequenceOutput(tok, GenerationRequest([1, 2], SamplingParams(max_tokens=500), events.append))
    reason = None
    for token in tok.encode(text, special=True):
        reason = out.feed(token)
        if reason is not None:
            break
    return "".join(e.text for e in events if isinstance(e, Delta)) + out.detok.flush(), reason


@pytest.mark.parametrize(("name", "special", "eos", "written", "answer"), [
    (QWEN3, [], "<|im_end|>", "<think>\nhm\n</think>\n\nParis.<|im_end|>ignored", "<think>\nhm\n</think>\n\nParis."),
    (SMOLLM3, [], "<|im_end|>", "<think>\nhm\n</think>\nParis.<|im_end|>ignored", "<think>\nhm\n</think>\nParis."),
    (R1_DISTILL, ["<｜end▁of▁sentence｜>"], "<｜end▁of▁sentence｜>", "hm\n</think>\n\nParis.<｜end▁of▁sentence｜>ignored",
     "hm\n</think>\n\nParis."),
    (GPT_OSS, HARMONY_TOKENS, "<|return|>",
     "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Paris.<|return|>ignored",
     "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Paris."),
])
def test_the_familys_stop_token_ends_the_answer_and_thinking_markup_reaches_the_splitter(
        tokenizer_with, name, special, eos, written, answer):
    from wren.engine.events import FinishReason

    gen_eos = (eos,) if name == R1_DISTILL else ("<|return|>", "<|endoftext|>", "<|call|>")
    tok = tokenizer_with(name, special, eos=eos, generation_eos=gen_eos)
    text, reason = generated(tok, written)
    assert (text, reason) == (answer, FinishReason.STOP)
