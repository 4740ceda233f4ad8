"""Where running summaries live: the database for saved chats, a dict for temporary ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..store import Store
from ..store.summaries import save_summary, summaries_of


@dataclass(frozen=True)
class SavedSummary:
    through_id: int  # the last message (in lineage order) the summary covers
    text: str
    covered: int  # how many messages it folds in


class Summaries(Protocol):
    def on_path(self, conversation_id: int | None, lineage_ids: Sequence[int]) -> list[SavedSummary]:
        """Saved summaries whose last message is on this lineage, in lineage order."""
        ...

    def save(self, conversation_id: int | None, summary: SavedSummary) -> None: ...


class SummaryStore:
    """Summaries in the conversation_summary table, one per (conversation, last message)."""

    def __init__(self, store: Store):
        self.db = store.db

    def on_path(self, conversation_id: int | None, lineage_ids: Sequence[int]) -> list[SavedSummary]:
        if conversation_id is None or not lineage_ids:
            return []
        position = {mid: n for n, mid in enumerate(lineage_ids)}
        rows = summaries_of(self.db, conversation_id)
        # Only a summary whose last message is on this branch describes this branch.
        on_path = sorted((r for r in rows if r[0] in position), key=lambda r: position[r[0]])
        return [SavedSummary(*r) for r in on_path]

    def save(self, conversation_id: int | None, summary: SavedSummary) -> None:
        if conversation_id is None:
            return
        save_summary(self.db, conversation_id, summary.through_id, summary.text, summary.covered)


class MemorySummaries:
    """Summaries kept in memory only: temporary chats, tests, benchmarks."""

    def __init__(self):
        self._rows: dict[tuple[int | None, int], SavedSummary] = {}

    def on_path(self, conversation_id: int | None, lineage_ids: Sequence[int]) -> list[SavedSummary]:
        found = (self._rows.get((conversation_id, mid)) for mid in lineage_ids)
        return [s for s in found if s is not None]

    def save(self, conversation_id: int | None, summary: SavedSummary) -> None:
        self._rows[(conversation_id, summary.through_id)] = summary


SUMMARY_SYSTEM = (
    "You keep a running summary of a conversation between a user and an assistant. "
    "Write plain sentences, no preamble."
)


def summary_prompt(turns: list[dict], previous: str, *, max_words: int = 150) -> list[dict]:
    """The chat to send the model to extend a running summary with `turns`.

    The Engine's `summarize` callable renders this with the tokenizer and generates greedily.
    """
    lines = [f"{'User' if t['role'] == 'user' else 'Assistant'}: {t['content']}" for t in turns]
    earlier = f"Summary so far:\n{previous}\n\n" if previous else ""
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {"role": "user", "content": (
            f"{earlier}Conversation to add:\n" + "\n".join(lines) + "\n\n"
            f"Write the updated summary in at most {max_words} words. Keep names, numbers, "
            "decisions, the user's stated preferences and any open questions."
        )},
    ]
