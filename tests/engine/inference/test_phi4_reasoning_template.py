"""Phi-4-mini-reasoning's real chat template (tests/data/families/phi3/phi4-mini-reasoning.jinja,
the one its Hugging Face repository ships): it renders in Wren's sandbox, the `<think>` its
answers open with is thinking although the template never names the tags, and the turn's
end token is one Wren stops on."""

from __future__ import annotations

from pathlib import Path

from wren.engine.inference import families
from wren.engine.inference.families.family import ReasoningFormat
from wren.engine.inference.reasoning import reasoning_format, splitter_for
from wren.engine.tokenize import Tokenizer

DATA = Path(__file__).resolve().parents[2] / "data" / "families" / "phi3"
TEMPLATE = (DATA / "phi4-mini-reasoning.jinja").read_text(encoding="utf-8")
PREAMBLE = "<|system|>Your name is Phi, an AI math expert developed by Microsoft."


def _tokenizer() -> Tokenizer:
    # the tiny phi3 fixture's tokenizer: Phi's special tokens (<|end|>, <|endoftext|>, roles)
    return Tokenizer(DATA / "hf" / "tokenizer.json", {"chat_template": TEMPLATE, "eos_token": "<|endoftext|>"})


def test_it_renders_in_the_sandbox_with_its_fixed_system_line():
    tok = _tokenizer()
    prompt = tok.render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])
    assert prompt == PREAMBLE + " Be brief.<|end|><|user|>2+2?<|end|><|assistant|>"
    alone = tok.render_chat([{"role": "user", "content": "2+2?"}])
    assert alone == PREAMBLE + "<|end|><|user|>2+2?<|end|><|assistant|>"


def test_the_answer_turn_ends_on_a_stop_token():
    tok = _tokenizer()
    chat = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    rendered = tok.render_chat(chat, add_generation_prompt=False)
    assert rendered.endswith("<|assistant|>4<|end|><|endoftext|>")
    assert tok._id("<|end|>") in tok.eos_ids and tok._id("<|endoftext|>") in tok.eos_ids


def test_its_think_tags_are_thinking():
    phi3 = families.by_model_type("phi3")
    assert phi3.reasoning is None  # Phi-4-mini-instruct does not think: the template decides
    fmt = reasoning_format(phi3.reasoning, TEMPLATE)
    assert fmt is ReasoningFormat.THINK_TAGS
    prompt = _tokenizer().render_chat([{"role": "user", "content": "2+2?"}])
    split = splitter_for(fmt, prompt)
    assert split is not None and not split.unclosed  # the model opens the tags itself
    stream = ["<th", "ink>\nTwo and two", " make four.\n</thi", "nk>\n\nThe answer is 4."]
    pieces = [p for chunk in stream for p in split.feed(chunk)] + split.finish()
    thinking = "".join(p.text for p in pieces if p.kind == "thinking")
    answer = "".join(p.text for p in pieces if p.kind == "answer")
    assert thinking.strip() == "Two and two make four." and answer == "The answer is 4."


def test_phi4_mini_instructs_template_still_has_no_thinking():
    instruct = (DATA / "chat_template.jinja").read_text(encoding="utf-8")  # Phi-3.5/4-mini-instruct's
    assert reasoning_format(families.by_model_type("phi3").reasoning, instruct) is None
