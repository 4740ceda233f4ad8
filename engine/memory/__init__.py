"""Long-term memories the user controls: store, retrieval, remember/forget requests."""

from .embed import Embedder, embeddings_available, load_embedder
from .intents import detect as detect_intents
from .records import (
    MAX_MEMORY_CHARS,
    IntentKind,
    MemoryInfo,
    MemoryIntent,
    MemoryRefused,
    Origin,
    Retrieved,
    SourceKind,
    Suggestion,
    TurnOutcome,
)
from .retrieve import RetrievalSettings, Retriever
from .service import MemoryService
from .settings import TEMPORARY_KEY, MemorySettings, is_temporary
from .store import MemoryStore

__all__ = [
    "MAX_MEMORY_CHARS", "TEMPORARY_KEY", "Embedder", "IntentKind", "MemoryInfo", "MemoryIntent",
    "MemoryRefused", "MemoryService", "MemorySettings", "MemoryStore", "Origin", "RetrievalSettings",
    "Retrieved", "Retriever", "SourceKind", "Suggestion", "TurnOutcome", "detect_intents",
    "embeddings_available", "is_temporary", "load_embedder",
]
