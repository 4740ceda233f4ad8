"""Engine: the one facade the desktop window, the CLI and the tests use."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from engine import paths
from engine.errors import InvalidRequest, ModelNotLoaded, WrenError
from engine.events import (
    Delta, Event, Failed, FailureKind, Finished, FinishReason, SafetyNotice, Started, Usage, event_to_dict,
)
from engine.inference.backend import Backend
from engine.inference.sampling import SamplingParams
from engine.inference.select import resolve_backend
from engine.inference.worker import GenerationRequest, ModelWorker
from engine.modelhub.registry import ModelInfo, ModelRegistry
from engine.logs import log_event
from engine.records import ConversationInfo, MessageInfo, MessageStatus, Role
from engine.safety import OutputGuard, Policy, ScanResult, scan
from engine.store import Store
from engine.tokenize import Tokenizer

log = logging.getLogger(__name__)

STARTER_MODEL = "smollm2-135m-instruct"
MAX_MESSAGE_CHARS = 2_000_000  # beyond this a paste is a mistake, not a question
CHECKPOINT_SECONDS = 0.25  # at most this much streamed text is at risk in a crash
# Empty: the model's own chat template supplies its default system text, which is what
# small models were tuned on; a user's system prompt (settings) replaces it.
DEFAULT_SYSTEM_PROMPT = ""

_STATUS_FOR = {
    FinishReason.STOP: MessageStatus.COMPLETE,
    FinishReason.LENGTH: MessageStatus.COMPLETE,
    FinishReason.CANCELLED: MessageStatus.STOPPED,
    FinishReason.ERROR: MessageStatus.FAILED,
    FinishReason.BLOCKED: MessageStatus.BLOCKED,
}


@dataclass(frozen=True)
class SendOptions:
    sampling: SamplingParams | None = None  # None: the conversation's, else the defaults
    system_prompt: str | None = None


@dataclass(frozen=True)
class ModelStatus:
    name: str
    backend: str
    context_length: int
    load_seconds: float


@dataclass
class _Active:
    request: GenerationRequest
    conversation_id: int | None


class Engine:
    """Conversations, models and streaming answers. Safe to use from one asyncio loop."""

    def __init__(
        self,
        store: Store,
        registry: ModelRegistry,
        *,
        backend_factory: Callable[[str], Backend] = resolve_backend,
        tokenizer_factory: Callable[[Path], Tokenizer] = Tokenizer.from_dir,
        policy: Policy | None = None,
    ):
        if policy is None:
            policy, warnings = Policy.load()
        else:
            warnings = []
        self.policy = policy
        self.policy_warnings: list[str] = warnings  # shown in settings; the shipped policy is in force
        self.store = store
        self.registry = registry
        self._backend_factory = backend_factory
        self._tokenizer_factory = tokenizer_factory
        self._db_pool = ThreadPoolExecutor(1, thread_name_prefix="wren-store")
        self._worker: ModelWorker | None = None
        self._status: ModelStatus | None = None
        self._load_lock = asyncio.Lock()
        self._active: list[_Active] = []
        self._closed = False

    @classmethod
    def open(cls, home: Path | None = None, **kwargs: Any) -> "Engine":
        """The engine over the user's data dir (or `home`)."""
        if home is not None:
            import os

            os.environ["WREN_HOME"] = str(home)
        return cls(Store(paths.database_path()), ModelRegistry(paths.models_dir()), **kwargs)

    async def close(self) -> None:
        """Stop answers, unload the model, close the database; calling it again is harmless."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        worker, self._worker, self._status = self._worker, None, None
        if worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
        await self._db(self.store.close)
        self._db_pool.shutdown(wait=True)

    async def _db(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Every database call runs on one worker thread, in order."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db_pool, lambda: fn(*args, **kwargs))

    # -- settings ------------------------------------------------------------------

    async def get_setting(self, key: str, default: Any = None) -> Any:
        return await self._db(self.store.get_setting, key, default)

    async def set_setting(self, key: str, value: Any) -> None:
        if key == "sampling":
            SamplingParams.from_dict(value)  # refuse bad defaults before saving them
        await self._db(self.store.set_setting, key, value)

    async def default_sampling(self) -> SamplingParams:
        saved = await self.get_setting("sampling")
        return SamplingParams.from_dict(saved) if saved else SamplingParams()

    # -- conversations -------------------------------------------------------------

    async def create_conversation(self, title: str = "", *, settings: dict | None = None) -> ConversationInfo:
        model = self._status.name if self._status else None
        return await self._db(self.store.create_conversation, title, model, settings)

    async def list_conversations(self, query: str | None = None) -> list[ConversationInfo]:
        return await self._db(self.store.list_conversations, query)

    async def get_conversation(self, conversation_id: int) -> ConversationInfo:
        return await self._db(self.store.get_conversation, conversation_id)

    async def rename_conversation(self, conversation_id: int, title: str) -> ConversationInfo:
        title = title.strip()
        if not title:
            raise InvalidRequest("a conversation title cannot be empty")
        return await self._db(self.store.update_conversation, conversation_id, title=title[:200])

    async def pin_conversation(self, conversation_id: int, pinned: bool = True) -> ConversationInfo:
        return await self._db(self.store.update_conversation, conversation_id, pinned=pinned)

    async def delete_conversation(self, conversation_id: int) -> None:
        self.stop(conversation_id)
        await self._db(self.store.delete_conversation, conversation_id)

    async def restore_conversation(self, conversation_id: int) -> ConversationInfo:
        return await self._db(self.store.restore_conversation, conversation_id)

    async def messages(self, conversation_id: int) -> list[MessageInfo]:
        """The visible branch of a conversation, oldest first."""
        return await self._db(self.store.messages, conversation_id)

    async def get_message(self, message_id: int) -> MessageInfo:
        return await self._db(self.store.get_message, message_id)

    async def switch_branch(self, message_id: int) -> list[MessageInfo]:
        """Show the branch through `message_id` (a sibling picked with `< 2/3 >`)."""
        msg = await self._db(self.store.get_message, message_id)
        await self._db(self.store.switch_to, message_id)
        return await self.messages(msg.conversation_id)

    async def sibling(self, message_id: int, step: int) -> list[MessageInfo]:
        """Move to the previous (-1) or next (+1) sibling of a message and show its branch."""
        msg = await self._db(self.store.get_message, message_id)
        siblings = await self._db(self.store.siblings, message_id)
        index = min(max(siblings.index(msg.id) + step, 0), len(siblings) - 1)
        return await self.switch_branch(siblings[index])

    # -- models --------------------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        """Installed models, importing the starter model first if this is a fresh install."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.registry.ensure_starter)
        return await loop.run_in_executor(None, self.registry.list)

    async def installed_models(self) -> list[ModelInfo]:
        """Installed models as they are now (no first-run import)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.registry.list)

    async def import_model(self, path: Path | str, *, name: str | None = None,
                           progress: Callable[[int, int], None] | None = None) -> ModelInfo:
        """Install a GGUF file (converted) or register a model folder; `progress(done, total)`
        is called from a worker thread."""
        path = Path(path)
        loop = asyncio.get_running_loop()
        if path.is_dir():
            return await loop.run_in_executor(None, lambda: self.registry.register_folder(path, name))
        return await loop.run_in_executor(
            None, lambda: self.registry.import_gguf(path, name, progress=progress)
        )

    @property
    def current_model(self) -> ModelStatus | None:
        return self._status

    async def load_model(self, name: str | None = None, *, backend: str | None = None, dtype: str = "auto",
                         progress: Callable[[int, int], None] | None = None) -> ModelStatus:
        """Load a model on its own inference thread; the previous one is unloaded.
        `progress(done, total)` reports the first-run starter import, from a worker thread."""
        async with self._load_lock:
            loop = asyncio.get_running_loop()
            if name is None:
                name = await self.get_setting("model")
            if backend is None:
                backend = await self.get_setting("backend", "auto")
            if name is None or name == STARTER_MODEL:
                info = await loop.run_in_executor(None, self.registry.ensure_starter, progress)
            else:
                info = await loop.run_in_executor(None, self.registry.get, name)
            chosen = self._backend_factory(backend)
            started = time.perf_counter()
            tokenizer = await loop.run_in_executor(None, self._tokenizer_factory, info.path)
            await self._unload()
            worker = ModelWorker(info.name, chosen, info.path, tokenizer, dtype=dtype)
            try:
                model = await asyncio.wrap_future(worker.loaded)
            except BaseException:
                worker.close()
                raise
            self._worker = worker
            self._status = ModelStatus(info.name, model.backend, model.context_length, time.perf_counter() - started)
            return self._status

    async def unload_model(self) -> None:
        async with self._load_lock:
            await self._unload()

    async def _unload(self) -> None:
        worker, self._worker, self._status = self._worker, None, None
        if worker is not None:
            for active in self._active:
                active.request.cancel.set()
            await asyncio.get_running_loop().run_in_executor(None, worker.close)

    async def _ensure_model(self) -> ModelWorker:
        if self._worker is None:
            await self.load_model()
        assert self._worker is not None
        return self._worker

    async def count_tokens(self, text: str) -> int:
        """Exact token count with the loaded model's tokenizer (off the caller's thread)."""
        worker = self._worker
        if worker is None:
            raise ModelNotLoaded("no model is loaded yet; token counts need its tokenizer")
        return await asyncio.get_running_loop().run_in_executor(None, worker.tokenizer.count, text)

    async def export(self, conversation_id: int, fmt: str = "markdown") -> str:
        """The visible branch of a conversation as Markdown or JSON text."""
        from engine import export

        if fmt not in ("markdown", "json"):
            raise InvalidRequest(f"unknown export format {fmt!r}; use markdown or json")
        conv = await self.get_conversation(conversation_id)
        shown = await self.messages(conversation_id)
        return export.to_json(conv, shown) if fmt == "json" else export.to_markdown(conv, shown)

    # -- generation ----------------------------------------------------------------

    def stop(self, conversation_id: int | None = None) -> None:
        """Stop streaming answers (all, or one conversation's) within one token."""
        for active in list(self._active):
            if conversation_id is None or active.conversation_id == conversation_id:
                active.request.cancel.set()

    async def send(self, conversation_id: int, text: str, options: SendOptions | None = None) -> AsyncIterator[Event]:
        """Scan and commit the user message, then stream the answer as typed events.

        A blocked message is not stored and nothing is sent (SafetyNotice events, then
        Finished(BLOCKED)); a redacted one is stored and sent redacted; warnings pass with
        their notices (front ends ask first with `scan_input`)."""
        _check_text(text)
        await self._db(self.store.get_conversation, conversation_id)  # NotFound before any write
        checked = await self.scan_input(text)
        notices = checked.notices("input")
        for notice in notices:
            yield notice
        if checked.blocked:
            log_event("send.blocked", conversation_id=conversation_id, safety=_notice_fields(notices))
            yield Finished(FinishReason.BLOCKED)
            return
        path = await self.messages(conversation_id)
        parent = path[-1].id if path else None
        meta = {"safety": _notice_fields(notices)} if notices else {}
        user = await self._db(
            self.store.add_message, conversation_id, Role.USER, checked.redacted_text, parent_id=parent, meta=meta
        )
        async for event in self._answer(user, options):
            yield event

    async def scan_input(self, text: str) -> ScanResult:
        """What the safety policy says about `text` before it is sent (off the loop thread)."""
        return await asyncio.get_running_loop().run_in_executor(
            None, scan, text, self.policy, self._destination()
        )

    def _destination(self) -> str:
        return "remote" if self._status and self._status.backend.startswith("remote") else "local"

    async def regenerate(self, message_id: int, options: SendOptions | None = None) -> AsyncIterator[Event]:
        """A new sibling answer for the user message that `message_id` answered."""
        msg = await self._db(self.store.get_message, message_id)
        if msg.role is Role.ASSISTANT:
            if msg.parent_id is None:
                raise InvalidRequest(f"message {message_id} has no question to answer again")
            msg = await self._db(self.store.get_message, msg.parent_id)
        if msg.role is not Role.USER:
            raise InvalidRequest(f"message {message_id} is not an answer or a question")
        async for event in self._answer(msg, options):
            yield event

    async def edit_and_resend(self, message_id: int, text: str, options: SendOptions | None = None) -> AsyncIterator[Event]:
        """A new branch: the edited question beside the original, then its answer."""
        _check_text(text)
        msg = await self._db(self.store.get_message, message_id)
        if msg.role is not Role.USER:
            raise InvalidRequest(f"message {message_id} is not a question; only questions can be edited")
        checked = await self.scan_input(text)
        notices = checked.notices("input")
        for notice in notices:
            yield notice
        if checked.blocked:
            yield Finished(FinishReason.BLOCKED)
            return
        meta = {"safety": _notice_fields(notices)} if notices else {}
        user = await self._db(
            self.store.add_message, msg.conversation_id, Role.USER, checked.redacted_text,
            parent_id=msg.parent_id, meta=meta,
        )
        async for event in self._answer(user, options):
            yield event

    async def _prompt_for(self, user: MessageInfo, options: SendOptions, worker: ModelWorker) -> tuple[list[int], list[dict]]:
        lineage = await self._db(self.store.lineage, user.id)
        system = options.system_prompt
        if system is None:
            conv = await self._db(self.store.get_conversation, user.conversation_id)
            system = conv.settings.get("system_prompt") or await self.get_setting("system_prompt", DEFAULT_SYSTEM_PROMPT)
        chat = [{"role": "system", "content": system}] if system else []
        for m in lineage:
            if m.role is Role.SYSTEM or not m.content or m.status in (MessageStatus.FAILED, MessageStatus.BLOCKED):
                continue
            chat.append({"role": m.role.value, "content": m.content})
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, chat)
        return ids, chat

    async def _answer(self, user: MessageInfo, options: SendOptions | None) -> AsyncIterator[Event]:
        options = options or SendOptions()
        conv = await self._db(self.store.get_conversation, user.conversation_id)
        params = options.sampling
        if params is None:
            saved = conv.settings.get("sampling")
            params = SamplingParams.from_dict(saved) if saved else await self.default_sampling()
        try:
            worker = await self._ensure_model()
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.MODEL)
            yield Finished(FinishReason.ERROR)
            return
        status = self._status
        prompt_ids, _ = await self._prompt_for(user, options, worker)
        limit = status.context_length
        if len(prompt_ids) >= limit:
            raise InvalidRequest(
                f"the conversation is {len(prompt_ids)} tokens long and the model's context "
                f"window holds {limit}; start a new chat or shorten the message"
            )
        params = params.with_(max_tokens=min(params.max_tokens, limit - len(prompt_ids)))
        answer = await self._db(
            self.store.add_message, user.conversation_id, Role.ASSISTANT, "", parent_id=user.id,
            status=MessageStatus.STREAMING, model=status.name, backend=status.backend,
            sampling=params.to_dict(), prompt_tokens=len(prompt_ids),
        )
        yield Started(user.conversation_id, user.id, answer.id, status.name, status.backend)
        async for event in self._stream(worker, answer, prompt_ids, params, user.conversation_id):
            yield event

    async def _stream(self, worker, answer: MessageInfo, prompt_ids, params, conversation_id) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        request = GenerationRequest(
            prompt_ids, params, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev)
        )
        active = _Active(request, conversation_id)
        self._active.append(active)
        parts: list[str] = []
        notices: list[SafetyNotice] = []
        guard = OutputGuard(self.policy, self._destination())
        saved_len = 0
        last_checkpoint = time.monotonic()
        usage: Usage | None = None
        error: str | None = None
        reason = FinishReason.CANCELLED  # if the consumer walks away mid-stream
        worker.submit(request)
        try:
            while True:
                event = await events.get()
                if isinstance(event, Delta):
                    # The guard holds back only what a forbidden string could still need.
                    step = guard.feed(event.text)
                elif isinstance(event, Finished):
                    reason = event.reason
                    step = guard.finish()
                else:
                    step = None
                if step is not None:
                    for notice in step.notices:
                        notices.append(notice)
                        yield notice
                    if step.text and not step.blocked:
                        parts.append(step.text)
                        yield Delta(step.text)
                    if step.blocked:
                        reason = FinishReason.BLOCKED
                        break
                if isinstance(event, Delta):
                    now = time.monotonic()
                    if now - last_checkpoint >= CHECKPOINT_SECONDS:
                        text = "".join(parts)
                        if len(text) != saved_len:
                            await self._db(self.store.update_message, answer.id, content=text)
                            saved_len = len(text)
                        last_checkpoint = now
                elif isinstance(event, Usage):
                    usage = event
                    yield event
                elif isinstance(event, Failed):
                    error = event.error
                    yield event
                elif isinstance(event, Finished):
                    break
        finally:
            request.cancel.set()
            self._active.remove(active)
            blocked = reason is FinishReason.BLOCKED
            fields: dict[str, Any] = {
                # A blocked answer keeps its notices, never its text.
                "content": "" if blocked else "".join(parts),
                "status": _STATUS_FOR[reason],
                "error": error,
            }
            if notices:
                fields["meta"] = {**answer.meta, "safety": _notice_fields(notices)}
            if usage is not None:
                fields.update(
                    completion_tokens=usage.completion_tokens,
                    time_to_first_token=usage.time_to_first_token,
                    tokens_per_second=usage.tokens_per_second,
                )
            await asyncio.shield(self._db(self.store.update_message, answer.id, **fields))
            log_event(
                "answer.finished", conversation_id=conversation_id, message_id=answer.id,
                model=answer.model, backend=answer.backend, reason=reason.value,
                prompt_tokens=len(prompt_ids), completion_tokens=usage.completion_tokens if usage else None,
                time_to_first_token=usage.time_to_first_token if usage else None,
                tokens_per_second=usage.tokens_per_second if usage else None,
                safety=_notice_fields(notices), error=error,
            )
        yield Finished(reason, answer.id)

    async def generate_title(self, conversation_id: int) -> str:
        """A short title from the first exchange; saved and returned."""
        path = await self.messages(conversation_id)
        if not path:
            raise InvalidRequest(f"conversation {conversation_id} has no messages to name it by")
        worker = await self._ensure_model()
        first = next((m.content for m in path if m.role is Role.USER), "")[:1000]
        chat = [
            {"role": "system", "content": "You write very short titles."},
            {"role": "user", "content": f"Write a title of at most six words for a chat that starts with: {first}"},
        ]
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, chat)
        events: asyncio.Queue = asyncio.Queue()
        params = SamplingParams(temperature=0.0, max_tokens=16, stop=("\n",))
        request = GenerationRequest(ids, params, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev), priority=1)
        worker.submit(request)
        parts = []
        while True:
            event = await events.get()
            if isinstance(event, Delta):
                parts.append(event.text)
            elif isinstance(event, Finished):
                break
        title = _clean_title("".join(parts)) or _clean_title(first) or "New chat"
        await self._db(self.store.update_conversation, conversation_id, title=title)
        return title


def _notice_fields(notices: list[SafetyNotice]) -> list[dict]:
    """Category, action, span and rule of each notice: never the matched text."""
    return [{k: v for k, v in event_to_dict(n).items() if k != "type"} for n in notices]


def _check_text(text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("the message is empty; type something to send")
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidRequest(
            f"the message is {len(text):,} characters long; the limit is {MAX_MESSAGE_CHARS:,}"
        )


def _clean_title(text: str) -> str:
    text = " ".join(text.replace('"', "").replace("Title:", "").split())
    return text[:60].rstrip(" .,:;")
