"""The citation benches' scoring (docs_cited.py on the project's questions, docs_heldout.py
on held-out ones)."""

from __future__ import annotations

from collections.abc import Callable


def rates(rows: list[dict], cited_of: Callable[[dict], list[str]]) -> dict:
    """Cite rate (the right file among the answer's citations) and precision (the share of
    citations that name the right file) of `cited_of(row)`, the files each answer cites."""
    cited = [(r["file"], cited_of(r)) for r in rows]
    made = sum(len(files) for _, files in cited)
    right = sum(files.count(name) for name, files in cited)
    return {"cites_file_rate": round(sum(name in files for name, files in cited) / len(rows), 3),
            "precision": round(right / made, 3) if made else None, "citations": made}
