"""What the answering half (engine/turns.py, engine/titles.py, engine/turn/) uses of the
engine: the core's public members and the services it answers with. A protocol, so those
modules name no concrete engine class and import none of the services at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..tools.runner import ToolHost

if TYPE_CHECKING:
    from ..context import ContextAssembler
    from ..conversations import Conversations
    from ..inference.worker import ModelWorker
    from ..memory import MemoryService
    from ..memory.facade import Memories
    from ..models import Models
    from ..records import ModelStatus
    from ..safety.facade import Safety
    from ..settings import Settings
    from ..store import Store


class TurnHost(ToolHost, Protocol):
    """Everything the answering half (Turns, Titles) uses of the engine: the core's public
    members and the services it answers with; the seam between them (docs/architecture.md,
    "Seams"). `Engine` implements it; Turns reaches nothing else of the engine's, and no
    private member (tests/engine/test_seams.py)."""

    @property
    def store(self) -> Store: ...
    @property
    def memory(self) -> MemoryService: ...
    @property
    def model_status(self) -> ModelStatus | None: ...  # the loaded model's name, backend, window
    @property
    def loaded_worker(self) -> ModelWorker | None: ...
    async def db(self, fn: Any, *args: Any, **kwargs: Any) -> Any: ...  # on the database thread
    def store_for(self, record_id: int) -> Store: ...  # the main store, or temporary chats' one
    def assembler_for(self, conversation_id: int | None) -> ContextAssembler: ...
    def destination(self) -> str: ...  # "local" or "remote": which safety policy column applies
    def answer_started(self, request: Any, conversation_id: int) -> None: ...  # Stop can reach it
    def answer_ended(self, request: Any, conversation_id: int) -> None: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def safety(self) -> Safety: ...
    @property
    def memories(self) -> Memories: ...
    @property
    def conversations(self) -> Conversations: ...
    @property
    def models(self) -> Models: ...
