"""The prompt side of tools: the schemas handed to the chat template (`tools=`), the
assistant's calls and the tool-role results of earlier rounds as chat messages, and, for a
template that does not render tools itself, the same in Wren's own (Hermes-style) words."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..inference.constrain import Constraint
from .parse import family_for
from .registry import ToolSource, ToolSpec

if TYPE_CHECKING:
    from ..tokenize import Tokenizer

FALLBACK_INSTRUCTIONS = (
    "You can call tools. They are listed as JSON between <tools> and </tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call one, answer with exactly this and nothing after it:\n"
    "<tool_call>\n{{\"name\": \"TOOL NAME\", \"arguments\": {{ARGUMENTS AS JSON}}}}\n</tool_call>\n"
    "The result comes back in a tool message. Call a tool only when you need it, then answer the user."
)


def schema_of(spec: ToolSpec) -> dict:
    """A tool as chat templates expect it (the OpenAI function shape)."""
    return {"type": "function", "function": {
        "name": spec.name, "description": spec.description, "parameters": spec.parameters,
    }}


@dataclass
class CallRecord:
    id: str  # the engine's id ("call_12_1")
    template_id: str  # the id the prompt shows (Mistral's templates want 9 letters and digits)
    name: str
    arguments: dict
    result: str = ""


@dataclass
class RoundRecord:
    text: str  # what the assistant wrote before its calls in this round
    calls: list[CallRecord] = field(default_factory=list)


@dataclass
class ToolPlan:
    """Which tools one answer may call, and how they reach this model's prompt."""

    entries: list[tuple[ToolSpec, ToolSource]]
    family: str
    native: bool  # the chat template renders `tools` (and tool calls) itself
    tool_role: str = "tool"  # the role results are rendered in ("user" only where a template has no other)
    forced: str | None = None  # tool_choice=NAME: the first round must call this tool
    max_rounds: int = 8

    @property
    def specs(self) -> list[ToolSpec]:
        return [s for s, _ in self.entries]

    def find(self, name: str) -> tuple[ToolSpec, ToolSource] | None:
        return next(((s, src) for s, src in self.entries if s.name == name), None)

    def schemas(self) -> list[dict]:
        return [schema_of(s) for s in self.specs]

    def template_tools(self) -> list[dict] | None:
        return self.schemas() if self.native else None

    def messages(self, base: list[dict], rounds: list[RoundRecord]) -> list[dict]:
        """The chat for the next generation: the assembled messages, the tool instructions
        where the template has none, then each round's calls and results."""
        chat = self.instructed(base)
        for r in rounds:
            for k, call in enumerate(r.calls):
                chat.append(self.call_message(r.text if k == 0 else "", [(call.template_id, call.name, call.arguments)]))
                chat.append(self.result_message(call.template_id, call.name, call.result))
        return chat

    def instructed(self, base: list[dict]) -> list[dict]:
        """A copy of `base` with Wren's tool instructions in its system message where the
        template does not render tools itself."""
        chat = [dict(m) for m in base]
        if not self.native:
            text = FALLBACK_INSTRUCTIONS.format(tools="\n".join(json.dumps(s, ensure_ascii=False) for s in self.schemas()))
            if chat and chat[0].get("role") == "system":
                own = chat[0].get("content") or ""
                chat[0]["content"] = f"{own}\n\n{text}" if own else text
            else:
                chat.insert(0, {"role": "system", "content": text})
        return chat

    def call_message(self, text: str, calls: list[tuple[str, str, Any]]) -> dict:
        """The assistant message that wrote `text` and then `calls` ((id, name, arguments)):
        `tool_calls` for a template that renders them, else the calls in Wren's own words."""
        if self.native:
            return {"role": "assistant", "content": text, "tool_calls": [
                {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}
                for ident, name, arguments in calls]}
        written = "\n".join(
            f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"
            for _, name, arguments in calls)
        return {"role": "assistant", "content": f"{text}{written}"}

    def result_message(self, call_id: str, name: str, content: str) -> dict:
        """A call's result as the message the template (or Wren's own format) expects."""
        if self.native:
            return {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}
        return {"role": self.tool_role, "content": f"<tool_response>\n{content}\n</tool_response>"}

    def forced_prefix(self) -> str:
        """The start of the call tool_choice=NAME forces; the model writes the arguments."""
        name = json.dumps(self.forced)
        if self.family == "llama3":
            return f'{{"name": {name}, "parameters": '
        if self.family == "mistral":
            return f'[TOOL_CALLS][{{"name": {name}, "arguments": '
        return f'<tool_call>\n{{"name": {name}, "arguments": '

    def encode(self, tokenizer: Tokenizer, chat: list[dict], *, opened: bool) -> list[int]:
        """`chat` (instructions already in, see `instructed`) as prompt ids, the tools given to
        a template that renders them; `opened`: with the forced call's opening after it, so
        the model writes only the arguments."""
        ids = tokenizer.encode_chat(chat, tools=self.template_tools())
        if opened and self.forced:
            head = tokenizer.encode(self.forced_prefix(), special=True)
            if tokenizer.add_bos and head[:1] == [tokenizer.bos_id]:
                head = head[1:]
            ids = ids + head
        return ids

    def forced_constraint(self) -> Constraint:
        """The forced call's arguments held to its schema (its opening is in the prompt).
        Raises ConstraintError where the grammar engine cannot take the schema."""
        assert self.forced is not None
        params = {s.name: s.parameters for s in self.specs}
        return Constraint.tool_call(self.forced, params[self.forced], family=self.family, opened=True)

    def calls_constraint(self, *, lazy: bool) -> Constraint:
        """Calls of the offered tools held to their schemas: from the first token, or (lazy)
        once the model opens a call in free text. Raises ConstraintError as above."""
        return Constraint.tool_calls({s.name: s.parameters for s in self.specs}, family=self.family, lazy=lazy)


def plan_for(tokenizer: Tokenizer, entries: list[tuple[ToolSpec, ToolSource]], *, forced: str | None = None,
             max_rounds: int = 8, model_type: str | None = None) -> ToolPlan:
    template = tokenizer.chat_template or ""
    family = family_for(template, model_type)
    native = "tools" in template and family_for(template) == family and _renders_tools(tokenizer, entries)
    if not native:
        family = "hermes"  # Wren's own instructions describe the hermes format
    plan = ToolPlan(entries, family, native, forced=forced, max_rounds=max_rounds)
    if not native:
        plan.tool_role = "tool" if _renders_role(tokenizer, "tool") else "user"
    return plan


def _renders_tools(tokenizer: Tokenizer, entries: list[tuple[ToolSpec, ToolSource]]) -> bool:
    """Whether the template shows the tools it is given (some mention `tools` only to refuse them)."""
    if not entries:
        return False
    probe = [{"role": "user", "content": "?"}]
    try:
        shown = tokenizer.render_chat(probe, tools=[schema_of(entries[0][0])])
    except Exception:
        return False
    return entries[0][0].name in shown


def _renders_role(tokenizer: Tokenizer, role: str) -> bool:
    probe: list[dict[str, Any]] = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"},
                                   {"role": role, "content": "wren-probe-result"}]
    try:
        return "wren-probe-result" in tokenizer.render_chat(probe)
    except Exception:
        return False
