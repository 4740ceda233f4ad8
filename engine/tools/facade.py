"""The Engine's tools half (docs/tools.md): the tools it offers, which are enabled, the
user's approvals, and cancelling a running call. Mixed into `Engine`; relies on its
`get_setting`, `set_setting`, `policy` and `_db`."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest
from ..events import ToolResult
from .builtin import BuiltinTools
from .capability import ToolSupport, tool_support
from .registry import ToolInfo, ToolRegistry, validate_arguments

if TYPE_CHECKING:
    from ..safety import Policy

DISABLED_KEY = "tools.disabled"  # names the user switched off (every tool is on until then)
ALWAYS_KEY = "tools.always_allowed"  # names whose calls no longer wait for approval
CONVERSATION_KEY = "tools"  # conversation setting: the tools that chat may use
DEFAULT_KEY = "tools.default"  # the tools a chat without its own choice may use (default: none)
MAX_ROUNDS_KEY = "tools.max_rounds"
TIMEOUT_KEY = "tools.timeout_seconds"
RESULT_TOKENS_KEY = "tools.result_tokens"
CONSTRAIN_KEY = "tools.constrain"  # False: calls are not constrained while written (default: they are)
DEFAULT_MAX_ROUNDS = 8
DEFAULT_TIMEOUT = 60.0
DEFAULT_RESULT_TOKENS = 2000
DECISIONS = ("once", "always", "deny")


@dataclass
class ToolState:
    """What the engine keeps about tools between calls (one per Engine)."""

    registry: ToolRegistry
    approvals: dict[str, asyncio.Future] = field(default_factory=dict)  # call id -> the user's decision
    running: dict[str, asyncio.Task] = field(default_factory=dict)  # call id -> its task
    cancelled: set[str] = field(default_factory=set)  # calls the user cancelled (cancel_tool)


class Tools:
    """Mixed into `Engine`."""

    policy: Policy

    @property
    def tool_state(self) -> ToolState:
        state = self.__dict__.get("_tool_state")
        if state is None:
            registry = ToolRegistry()
            registry.add_source(BuiltinTools(self))  # type: ignore[arg-type]
            state = self.__dict__["_tool_state"] = ToolState(registry)
        return state

    @property
    def tool_registry(self) -> ToolRegistry:
        """Where tool sources (MCP servers) register: `add_source(src)`, `remove_source(name)`."""
        return self.tool_state.registry

    async def tools(self) -> list[ToolInfo]:
        disabled = set(await self._name_list(DISABLED_KEY))
        return [
            ToolInfo(s.name, s.description, s.parameters, s.needs_approval, src.name, s.name not in disabled)
            for s, src in self.tool_registry.entries()
        ]

    async def set_tool_enabled(self, name: str, enabled: bool) -> None:
        self._known_tool(name)
        disabled = [n for n in await self._name_list(DISABLED_KEY) if n != name]
        if not enabled:
            disabled.append(name)
        await self.set_setting(DISABLED_KEY, sorted(disabled) or None)

    def approve_tool(self, call_id: str, decision: str) -> None:
        """The user's answer to ToolApprovalNeeded: "once", "always" or "deny"."""
        if decision not in DECISIONS:
            raise InvalidRequest(f"{decision!r} is not a tool approval; use once, always or deny")
        waiting = self.tool_state.approvals.get(call_id)
        if waiting is None:
            raise InvalidRequest(f"no tool call {call_id!r} is waiting for approval")
        if not waiting.done():
            waiting.set_result(decision)

    def cancel_tool(self, call_id: str) -> None:
        """Stop a running call (or one waiting for approval); its result is the error
        "cancelled by the user" and the answer goes on. Unknown or finished calls: no-op."""
        state = self.tool_state
        waiting = state.approvals.get(call_id)
        if waiting is not None and not waiting.done():
            state.cancelled.add(call_id)
            waiting.set_result("cancel")
            return
        task = state.running.get(call_id)
        if task is not None and not task.done():
            state.cancelled.add(call_id)
            task.cancel()

    async def always_allowed_tools(self) -> list[str]:
        return await self._name_list(ALWAYS_KEY)

    async def allow_tool_always(self, name: str) -> None:
        names = await self._name_list(ALWAYS_KEY)
        if name not in names:
            await self.set_setting(ALWAYS_KEY, sorted([*names, name]))

    async def revoke_tool_approval(self, name: str) -> None:
        names = [n for n in await self._name_list(ALWAYS_KEY) if n != name]
        await self.set_setting(ALWAYS_KEY, names or None)

    async def conversation_tools(self, conversation_id: int) -> list[str] | None:
        """The tools this chat may use (its setting `tools`); None: it has no choice of its
        own, so `tools.default` applies."""
        conv = await self.get_conversation(conversation_id)  # type: ignore[attr-defined]
        value = conv.settings.get(CONVERSATION_KEY)
        return [n for n in value if isinstance(n, str)] if isinstance(value, list) else None

    async def set_conversation_tools(self, conversation_id: int, names: list[str] | tuple[str, ...] | None) -> None:
        """Keep this chat's choice of tools (None: back to `tools.default`); later answers,
        regenerations and edits use it when Send gives no tools of its own."""
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) for n in names)):
            raise InvalidRequest(f"a chat's tools must be a list of tool names, not {names!r}")
        conv = await self.get_conversation(conversation_id)  # type: ignore[attr-defined]
        settings = dict(conv.settings)
        if names is None:
            settings.pop(CONVERSATION_KEY, None)
        else:
            settings[CONVERSATION_KEY] = list(dict.fromkeys(names))
        store = self._store_for(conversation_id)  # type: ignore[attr-defined]
        await self._db(store.update_conversation, conversation_id, settings=settings)  # type: ignore[attr-defined]

    async def call_tool(self, name: str, arguments: dict, *, timeout: float | None = None) -> ToolResult:
        """Run a tool directly (`wren tools call`): the user asked, so no approval; the
        arguments are validated; a failure is an error result, not an exception."""
        await self.prepare_tool_sources([name])  # an MCP tool's server starts on first use
        found = self._known_tool(name)
        spec, source = found
        started = time.perf_counter()
        problem = validate_arguments(spec.parameters, arguments, name)
        if problem:
            return ToolResult(f"direct_{name}", problem, True, 0.0)
        cancel = asyncio.Event()
        if timeout is None:
            timeout = await self.tool_timeout()
        try:
            content, is_error = await asyncio.wait_for(source.call(name, arguments, cancel), timeout)
        except TimeoutError:
            cancel.set()
            content, is_error = f"the tool {name} did not answer within {timeout:g} seconds", True
        except Exception as exc:  # a tool's own failure is its result
            content, is_error = f"the tool {name} failed: {type(exc).__name__}: {exc}", True
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        return ToolResult(f"direct_{name}", content, bool(is_error), time.perf_counter() - started)

    async def tool_support(self) -> ToolSupport | None:
        """Whether the loaded model calls tools (engine/tools/capability.py); None: no model is loaded."""
        status, worker = self.model_status, self.loaded_worker  # type: ignore[attr-defined]
        if status is None or worker is None:
            return None
        tokenizer = getattr(worker, "tokenizer", None)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: tool_support(status.name, tokenizer, remote=status.backend == "remote"))

    async def tool_timeout(self) -> float:
        value = await self.get_setting(TIMEOUT_KEY)
        return float(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_TIMEOUT

    # -- helpers -----------------------------------------------------------------------

    def _known_tool(self, name: str) -> Any:
        found = self.tool_registry.find(name)
        if found is None:
            known = ", ".join(self.tool_registry.names()) or "none"
            raise InvalidRequest(f"there is no tool named {name!r}; the tools are: {known}")
        return found

    async def _name_list(self, key: str) -> list[str]:
        value = await self.get_setting(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
