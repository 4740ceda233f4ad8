"""Long-term memories the user controls: store, retrieval, remember/forget requests."""

from engine.memory.embed import Embedder, embeddings_available, load_embedder
from engine.memory.intents import detect as detect_intents
from engine.memory.records import (
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
from engine.memory.retrieve import RetrievalSettings, Retriever
from engine.memory.service import MemoryService
from engine.memory.settings import TEMPORARY_KEY, MemorySettings, is_temporary
from engine.memory.store import MemoryStore

__all__ = [
    "MAX_MEMORY_CHARS", "TEMPORARY_KEY", "Embedder", "IntentKind", "MemoryInfo", "MemoryIntent",
    "MemoryRefused", "MemoryService", "MemorySettings", "MemoryStore", "Origin", "RetrievalSettings",
    "Retrieved", "Retriever", "SourceKind", "Suggestion", "TurnOutcome", "detect_intents",
    "embeddings_available", "is_temporary", "load_embedder",
]
