"""An installed model's licence, as its own files say it: the GGUF's `general.license`, the
model card's `license:` (README.md front matter), a licence file in its folder, or, for the
starter, the licence of the package it ships in. None when nothing records one."""

from __future__ import annotations

import logging
import re
from importlib import metadata
from pathlib import Path

from ..errors import WrenError
from .gguf_import import GGUF_FILE
from .registry import STARTER_PACKAGE, ModelInfo, ModelSource

log = logging.getLogger(__name__)

LICENCE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "LICENCE.txt", "COPYING")
# Model files and cards write SPDX ids in lower case (Hugging Face's habit); shown as SPDX spells them.
_SPDX = {name.lower(): name for name in ("Apache-2.0", "MIT", "BSD-3-Clause", "BSD-2-Clause", "GPL-3.0",
                                         "LGPL-3.0", "CC-BY-4.0", "CC-BY-SA-4.0", "CC-BY-NC-4.0", "CC0-1.0")}
_CARD_LICENCE = re.compile(r"^license:\s*['\"]?([^'\"\n]+)", re.MULTILINE)


def _from_gguf(folder: Path) -> str | None:
    from .gguf_file import GGUFFile

    path = folder / GGUF_FILE
    if not path.is_file():
        return None
    try:
        with GGUFFile(path) as gguf:
            value = gguf.metadata.get("general.license")
    except (OSError, ValueError, WrenError) as exc:  # a damaged file says nothing of its licence
        log.info("no licence read from %s: %s", path, exc)
        return None
    return value.strip() if isinstance(value, str) and value.strip() else None


def _from_card(folder: Path) -> str | None:
    card = folder / "README.md"
    if not card.is_file():
        return None
    found = _CARD_LICENCE.search(card.read_text(encoding="utf-8", errors="replace")[:4000])
    return found.group(1).strip() if found else None


def _from_file(folder: Path) -> str | None:
    return next((f"in {folder / name}" for name in LICENCE_FILES if (folder / name).is_file()), None)


def _from_package(name: str) -> str | None:
    try:
        meta = metadata.metadata(name.replace("_", "-"))
    except metadata.PackageNotFoundError:
        return None
    for key in ("License-Expression", "License"):
        values = meta.get_all(key) or []
        if values and values[0].strip() and "\n" not in values[0] and len(values[0]) < 60:
            return values[0].strip()
    return None


def folder_licence(folder: Path) -> str | None:
    """What a model folder's own files say (GGUF metadata, card, licence file)."""
    if not folder.is_dir():
        return None
    return _from_gguf(folder) or _from_card(folder) or _from_file(folder)


def spelled(licence: str) -> str:
    """A licence id as SPDX spells it ("apache-2.0" -> "Apache-2.0"); others as given."""
    return _SPDX.get(licence.strip().lower(), licence.strip())


def model_licence(info: ModelInfo) -> str | None:
    """An installed model's licence; the starter's package speaks for it where its file is silent."""
    found = folder_licence(Path(info.path))
    if found is None and info.source == ModelSource.STARTER:
        found = _from_package(STARTER_PACKAGE)
    return spelled(found) if found else None
