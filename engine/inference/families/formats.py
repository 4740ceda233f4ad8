"""The tool-call formats model families write (engine.tools.parse reads them from a stream,
engine.inference.constrain holds an answer to them):

- "hermes" (Qwen 2.5/3, Hermes, SmolLM3, and Wren's own format for templates without
  tools): `<tool_call>\\n{"name": N, "arguments": A}\\n</tool_call>`
- "llama3" (Llama 3.1-3.3 JSON calls): `{"name": N, "parameters": A}`, or after `<|python_tag|>`
- "mistral" (`[TOOL_CALLS]` tokenizers, v3 and later): `[TOOL_CALLS][{"name": N, "arguments": A}]`
- "granite" (Granite 3.x): `<|tool_call|>[{"name": N, "arguments": A}, ...]`, a JSON list
- "phi4" (Phi-4-mini, tools declared in `<|tool|>...<|/tool|>`):
  `<|tool_call|>{"name": N, "arguments": A}<|/tool_call|>`, one call per pair of tags

Granite's and Phi-4-mini's tags are special tokens: the token stream keeps their text
(engine/tokenize.py, TOOL_MARKERS) so the parser sees where a call starts and ends.
"""

from __future__ import annotations

from .family import ToolFormat

HERMES = ToolFormat("hermes", marker="<tool_call>", trigger="<tool_call>", before="<tool_call>\n",
                    after="\n</tool_call>", args_key="arguments")
LLAMA3 = ToolFormat("llama3", marker="<|python_tag|>", trigger='{"name": ', before="", after="",
                    args_key="parameters", bare=True)
MISTRAL = ToolFormat("mistral", marker="[TOOL_CALLS]", trigger="[TOOL_CALLS]", before="[TOOL_CALLS]",
                     after="", args_key="arguments", array=True, bare=True)
GRANITE = ToolFormat("granite", marker="<|tool_call|>", trigger="<|tool_call|>", before="<|tool_call|>",
                     after="", args_key="arguments", array=True)
PHI4 = ToolFormat("phi4", marker="<|tool_call|>", trigger="<|tool_call|>", before="<|tool_call|>",
                  after="<|/tool_call|>", args_key="arguments")
# Special tokens a stream keeps as text for the parser (engine/tokenize.py drops the others').
TOOL_MARKERS = ("<|tool_call|>", "<|/tool_call|>")
