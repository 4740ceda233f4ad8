"""Engine: the engine core with its services, the one object every front end opens.

A front end opens one `Engine` and reaches everything through its services, each an
attribute: `engine.conversations`, `engine.chat`, `engine.models`, `engine.memories`,
`engine.settings`, `engine.safety`, `engine.tools`, `engine.providers`, `engine.privacy`,
`engine.library`, `engine.projects`, `engine.voice`
(docs/architecture.md). The core's own members (the database thread `db`, the stores, the
policy, the loaded model session, the notices) come from `engine.core.Core`. Each service
is given the core and the services it uses, so they form a tree with no cycles, and none
reaches into another's private state. Use from one asyncio loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import paths
from .chat import Chat
from .conversations import Conversations
from .core import Core
from .inference.backend import Backend
from .inference.select import resolve_backend
from .library.service import Library, ProjectsService
from .logs import log_event
from .memory.facade import Memories
from .modelhub.registry import ModelRegistry
from .modelhub.sizing import human_size
from .models import Models
from .network.facade import NetworkPrivacy
from .network.guard import install as install_network_guard
from .privacy import Privacy, purge_conversations
from .providers.facade import Providers
from .records import EngineNotice
from .safety import Policy
from .safety.facade import Safety
from .settings import Settings
from .store import Store
from .tokenize import Tokenizer
from .tools.facade import Tools
from .turns import Turns
from .voice.service import VoiceService

__all__ = ["Engine", "install_network_guard"]


class Engine(Core):
    """Conversations, models, memories and streaming answers: the core and its services."""

    def __init__(
        self,
        store: Store,
        registry: ModelRegistry,
        *,
        backend_factory: Callable[[str], Backend] = resolve_backend,
        tokenizer_factory: Callable[[Path], Tokenizer] = Tokenizer.from_dir,
        policy: Policy | None = None,
    ):
        super().__init__(store, registry, backend_factory=backend_factory, tokenizer_factory=tokenizer_factory,
                         policy=policy)
        self.settings = Settings(self)
        self.safety = Safety(self)
        self.memories = Memories(self)
        self.library = Library(self)
        self.projects = ProjectsService(self.library)
        self.tools = Tools(self, self.settings)
        self.providers = Providers(self, self.settings)
        self.models = Models(self, self.settings, self.providers)
        self.privacy = Privacy(self)
        self.voice = VoiceService()  # dictation and read-aloud (engine/voice)
        self.network = NetworkPrivacy()  # the network ledger and the offline lock (engine/network)
        self.conversations = Conversations(self, self.tools, self.privacy)
        # The answering half uses the core and the services above (engine/turns.py, TurnHost).
        turns = Turns(self)
        self.library.complete = turns.complete  # query expansion's short request (engine/library/expand.py)
        self.chat = Chat(self, turns, self.conversations, self.settings, self.safety, self.models)
        self.summarizer = turns.summarize

    @classmethod
    def open(cls, home: Path | None = None, **kwargs: Any) -> Engine:
        """The engine over the user's data dir (or `home`)."""
        if home is not None:
            os.environ["WREN_HOME"] = str(home)
        from .engine_sockets import release_model

        registry = ModelRegistry(paths.models_dir(), before_remove=release_model)  # resident engines let go first
        leftovers = registry.sweep_leftovers()
        engine = cls(Store(paths.database_path()), registry, **kwargs)
        engine.leftovers = leftovers
        purge_conversations(engine.store, older_than=engine.privacy.undo_seconds)  # undo windows closed since
        if leftovers.removed:
            log_event("models.leftovers_removed", folders=list(leftovers.removed), bytes_freed=leftovers.bytes_freed)
            engine.notify(EngineNotice(
                "disk_freed",
                f"removed {len(leftovers.removed)} unfinished model folder(s) left by an interrupted "
                f"import or download, freeing {human_size(leftovers.bytes_freed)}",
                str(registry.root),
            ))
        return engine

    async def close(self) -> None:
        """Stop answers, unload the model, stop every MCP server, close the database;
        calling it again is harmless."""
        if self.closed:
            return
        self.closed = True
        self.stop_answers()
        await self.models.close()
        await self.tools.close()  # every MCP server stops with Wren
        await self.memories.close()
        await self.library.close()  # indexing stops between two files
        await self.privacy.close()  # deleted chats leave the disk (engine/privacy.py)
        await super().close()
