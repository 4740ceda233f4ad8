"""Retrieval quality on the project's own test set (tests/data/docs: Markdown, text, HTML,
CSV, PDF, DOCX, EPUB and code, with distractor files on near topics): for paraphrased
questions (tests/engine/docs/questions.json), the passage holding the answer is among the
first five at least 90% of the time. Hybrid search needs the embedder package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wren.engine.library.library import LibraryIndex
from wren.engine.memory.embed import embeddings_available, shared_embedder
from wren.engine.store import Store

DATA = Path(__file__).parents[2] / "data" / "docs"
QUESTIONS = json.loads((Path(__file__).parent / "questions.json").read_text())


def recall_at_5(library: LibraryIndex) -> tuple[float, list[str]]:
    missed = []
    for q in QUESTIONS:
        passages = library.search(q["q"], 5)
        if not any(Path(p.path).name == q["file"] and q["has"] in p.text for p in passages):
            missed.append(q["q"])
    return 1 - len(missed) / len(QUESTIONS), missed


@pytest.mark.skipif(not embeddings_available(), reason="the embedder package is not installed")
def test_recall_at_5_is_at_least_0_9(tmp_path: Path):
    store = Store(tmp_path / "wren.db")
    store.bind()
    try:
        library = LibraryIndex(store.db, lambda fn: fn(store.db), shared_embedder)
        library.add([DATA])
        progress = library.sync()
        assert progress.changed == len(list(DATA.iterdir())) and library.status()["skipped_total"] == 0
        recall, missed = recall_at_5(library)
        assert recall >= 0.9, missed
        # Words alone do worse: the vectors carry the paraphrases (the test can tell them apart).
        words_only = LibraryIndex(store.db, lambda fn: fn(store.db), lambda: None)
        assert recall_at_5(words_only)[0] < recall
    finally:
        store.close()
