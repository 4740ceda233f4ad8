"""Removing a library file's text from the answers that read it: the context report kept
with each answer (meta["context"]) holds the passages it put in the prompt, as `document`
parts and inside the rendered prompt. When their file leaves the library, each passage's
text there becomes REMOVED (the file's name and the chunk ids stay, so the report still
says a passage was used), and so does each cited passage kept with an answer. Runs on the database thread inside the removal's transaction."""

from __future__ import annotations

import json
from typing import Any

from ..store import citations as cited_rows
from ..store import privacy as rows

REMOVED = "[passage removed from the library]"


def scrub_passages(db: Any, removed: dict[int, str]) -> int:
    """Replace the text of the removed chunks (id -> text) in every answer's provenance;
    how many answers were rewritten."""
    if not removed:
        return 0
    cited_rows.scrub(db, removed, REMOVED)  # and the passages answers cited (their sources)
    changed = 0
    for message_id, raw in rows.metas_containing(db, '"document"'):
        try:
            meta = json.loads(raw)
        except (TypeError, ValueError):
            continue
        parts = (meta.get("context") or {}).get("parts") or []
        used = {i for p in parts if p.get("kind") == "document" for i in p.get("source_ids", ()) if i in removed}
        if not used:
            continue
        texts = sorted({removed[i] for i in used}, key=len, reverse=True)
        rows.set_meta_text(db, message_id, json.dumps(_replace(meta, texts), ensure_ascii=False))
        changed += 1
    return changed


def _replace(value: Any, texts: list[str]) -> Any:
    if isinstance(value, str):
        for text in texts:
            value = value.replace(text, REMOVED)
        return value
    if isinstance(value, list):
        return [_replace(v, texts) for v in value]
    if isinstance(value, dict):
        return {k: _replace(v, texts) for k, v in value.items()}
    return value
