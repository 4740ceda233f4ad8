"""A model whose chat template renders tools itself (a Qwen-style template): the tools go
in as `tools=`, the call as the assistant's `tool_calls`, the result as a `tool` message."""

from __future__ import annotations

import asyncio
import json
import shutil

from tests.engine.tools.conftest import by_round, call, collect
from wren.engine.events import Delta, ToolResult
from wren.engine.records import SendOptions
from wren.engine.tokenize import Tokenizer
from wren.engine.tools.builtin import CALCULATOR
from wren.engine.tools.prompt import plan_for

TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTOOLS:\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n"
    "Call with <tool_call></tool_call>.<|im_end|>\n{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n{{ message.content }}"
    "{%- for tc in message.tool_calls %}<tool_call>\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": "
    "{{ tc.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _with_template(src, dst):
    shutil.copytree(src, dst)
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


def test_plan_is_native_for_a_template_with_tools(tiny_model_dir, tmp_path):
    tok = Tokenizer.from_dir(_with_template(tiny_model_dir, tmp_path / "m"))
    plan = plan_for(tok, [(CALCULATOR, None)])
    assert plan.native and plan.family == "hermes"
    plain = plan_for(Tokenizer.from_dir(tiny_model_dir), [(CALCULATOR, None)])
    assert not plain.native and plain.tool_role == "tool"


def test_send_with_a_native_template(wren_home, tiny_model_dir, tmp_path, make_engine):
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(_with_template(tiny_model_dir, tmp_path / "q"), name="tiny")

    async def main():
        engine = make_engine(by_round("Sure. " + call("calculator", expression="2**8"), "256 it is."))
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "2^8?", SendOptions(tools=("calculator",))))
        prompts = engine.scripted.loaded[0].prompts
        await engine.close()
        return events, prompts

    events, prompts = asyncio.run(main())
    assert next(e for e in events if isinstance(e, ToolResult)).content == "256"
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "Sure. 256 it is."
    first, second = prompts[0], prompts[-1]
    assert "TOOLS:" in first and '"name": "calculator"' in first and "You can call tools" not in first
    assert ('<|im_start|>assistant\nSure. <tool_call>\n{"name": "calculator", "arguments": {"expression": "2**8"}}'
            in second)
    assert "<tool_response>\n256\n</tool_response>" in second


def test_a_template_without_tools_uses_wrens_hermes_instructions(tiny_model_dir):
    tok = Tokenizer.from_dir(tiny_model_dir)
    plan = plan_for(tok, [(CALCULATOR, None)], model_type="mistral")
    assert plan.family == "hermes" and not plan.native
    chat = plan.messages([{"role": "user", "content": "hi"}], [])
    assert chat[0]["role"] == "system" and "<tool_call>" in chat[0]["content"]
