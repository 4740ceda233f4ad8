"""A turn prepared once: what a Send reads from the database in one trip (`TurnReads`) and
the immutable plan built from it (`TurnPlan`): the assembled context, the scan of the
question, the tool plan, sampling and constraints. "Does it fit" is the plan's `fits`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..context import ContextSettings, Instructions, lineage
from ..context.assemble import ContextOverflow
from ..context.report import ContextReport, PartKind
from ..context.settings import INSTRUCTIONS_KEY
from ..context.settings import SETTING_KEY as CONTEXT_KEY
from ..errors import WrenError
from ..inference.presets import PRESETS_KEY
from ..memory.facade import vector_wanted
from ..tools import facade as tool_settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..context import AssembledContext
    from ..events import AnswerNotice
    from ..inference.constrain import Constraint
    from ..inference.sampling import SamplingParams
    from ..memory import MemoryService
    from ..records import ConversationInfo
    from ..safety import ScanResult
    from ..store import Store
    from ..tools.prompt import ToolPlan

SYSTEM_PROMPT_KEY = "system_prompt"
SAMPLING_KEY = "sampling"
_KEYS = (SYSTEM_PROMPT_KEY, CONTEXT_KEY, INSTRUCTIONS_KEY, SAMPLING_KEY, PRESETS_KEY,
         tool_settings.DEFAULT_KEY, tool_settings.DISABLED_KEY, tool_settings.MAX_ROUNDS_KEY,
         tool_settings.CONSTRAIN_KEY, tool_settings.RESULT_TOKENS_KEY)
LATEST = -1  # a parent id meaning "after the last message of the branch the user sees"


@dataclass(frozen=True)
class TurnSettings:
    """The settings a turn reads, from one query: the conversation's own and the app's."""

    conversation: dict  # the conversation's settings
    saved: dict  # {key: value} of the app settings in _KEYS that are set

    @property
    def system_prompt(self) -> Any:
        return self.saved.get(SYSTEM_PROMPT_KEY)

    @property
    def context(self) -> ContextSettings:
        return ContextSettings.from_dict(self.saved.get(CONTEXT_KEY))

    @property
    def instructions(self) -> Instructions:
        return Instructions.from_dict(self.saved.get(INSTRUCTIONS_KEY))

    def get(self, key: str, default: Any = None) -> Any:
        return self.saved.get(key, default)


def read_settings(store: Store, conversation: dict | None, conv_store: Store | None = None,
                  conversation_id: int | None = None) -> TurnSettings:
    """On the database thread: the app settings a turn reads, and the conversation's settings
    (`conversation`, or read from `conv_store` when None; {} for a chat not made yet)."""
    if conversation is None:
        conversation = conv_store.get_conversation(conversation_id).settings if (
            conv_store is not None and conversation_id is not None) else {}
    return TurnSettings(conversation, store.get_settings(*_KEYS))


@dataclass(frozen=True)
class EarlyRetrieval:
    """What retrieving a question's memories in the turn's read takes (one trip less):
    possible where the question gets no vector (memory not used in the chat, nothing to
    find, or no embedder, `no_embedder`), as a vector is made on the loop between trips."""

    memory: MemoryService
    text: str  # the question as the model reads it
    window: int
    count: Callable[[str], int]  # the model's token counter
    worker: Any  # the model it is for: another one retrieves again
    no_embedder: bool


@dataclass(frozen=True)
class TurnReads:
    """Everything a turn reads before its prompt is built, from one trip to the database
    thread: the conversation, the history the question follows, the settings (and, where
    it could, the memories retrieved for the question)."""

    conversation: ConversationInfo
    parent_id: int | None
    history: tuple  # message rows or MessageInfo, oldest first, ending at parent_id
    settings: TurnSettings
    early: EarlyRetrieval | None = None
    retrieved: list | None = None  # made in the read for `early`; None: not retrieved yet

    def retrieved_for(self, worker: Any, window: int) -> list | None:
        """The memories retrieved in the read, if they were for this model and window."""
        early = self.early
        ok = early is not None and early.worker is worker and early.window == window
        return self.retrieved if ok else None


def read_turn(store: Store, conv_store: Store, conversation_id: int, parent_id: int | None,
              early: EarlyRetrieval | None = None) -> TurnReads:
    """On the database thread. `parent_id` LATEST: after the shown branch's last message
    (NotFound for a conversation that does not exist, before anything is written).
    `early`: the question's memories are retrieved too, where it needs no vector."""
    if parent_id == LATEST:
        history: list[Any] = conv_store.messages(conversation_id)
        parent_id = history[-1].id if history else None
        conversation = conv_store.get_conversation(conversation_id)
    else:
        conversation = conv_store.get_conversation(conversation_id)
        history = lineage(conv_store, parent_id) if parent_id else []
    settings = read_settings(store, conversation.settings)
    reads = TurnReads(conversation, parent_id, tuple(history), settings)
    if early is None or not (early.no_embedder or not vector_wanted(early.memory, conversation.settings)):
        return reads
    retrieved = early.memory.retrieve(
        early.text, budget_tokens=settings.context.memory_budget(early.window), count=early.count,
        conversation_id=conversation_id, conversation_settings=conversation.settings)
    return dataclasses.replace(reads, early=early, retrieved=retrieved)


@dataclass(frozen=True)
class TurnPlan:
    """One Send, prepared once and passed down; nothing in it changes afterwards.

    `overflow` is set (and `assembled` is None) for a question that cannot fit the window."""

    conversation_id: int
    question: str  # the text as the model reads it (redacted where the policy says so)
    message_id: int | None  # the question's message, None before it is stored
    scan: ScanResult
    settings: TurnSettings
    history: tuple
    window: int
    assembled: AssembledContext | None = None
    prompt_ids: tuple[int, ...] = ()
    sampling: SamplingParams | None = None
    tools: ToolPlan | None = None
    tools_dropped: str | None = None  # why some tools were left out (they did not fit)
    constraint: Constraint | None = None  # response_format (SendOptions.constraint), without tools
    notices: tuple[AnswerNotice, ...] = ()  # told the user with Started: files or tools cut
    overflow: ContextOverflow | None = None
    problem: WrenError | None = None  # the tools asked for cannot be offered: the answer fails with this

    @property
    def fits(self) -> bool:
        return self.overflow is None

    def check(self) -> TurnPlan:
        """The plan, or its ContextOverflow raised."""
        if self.overflow is not None:
            raise self.overflow
        return self

    @property
    def report(self) -> ContextReport:
        assert self.assembled is not None, "a plan that does not fit has no report"
        return self.assembled.report

    @property
    def folds_history(self) -> bool:
        """Older turns did not fit verbatim: an assembly allowed to summarize could differ."""
        return self.assembled is not None and any(p.kind is PartKind.HISTORY for p in self.report.parts)

    def for_message(self, message_id: int) -> TurnPlan:
        """The plan once its question is stored: the report names the message."""
        if self.assembled is None:
            return dataclasses.replace(self, message_id=message_id)
        parts = tuple(dataclasses.replace(p, source_ids=(message_id,)) if p.kind is PartKind.NEW_MESSAGE else p
                      for p in self.report.parts)
        report = dataclasses.replace(self.report, parts=parts)
        return dataclasses.replace(self, message_id=message_id,
                                   assembled=dataclasses.replace(self.assembled, report=report))
