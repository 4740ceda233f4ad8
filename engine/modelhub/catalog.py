"""The curated list of models Wren offers to download (resources/models/catalog.json), and
how much memory this computer has to run them."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from ..inference import families

CATALOG_RESOURCE = "models/catalog.json"
# The system and the programs already open need memory too: a model "fits" when it needs at
# most this share of the computer's RAM.
FIT_SHARE = 0.8
KV_TOKENS = 4096
# The same figures engine.modelhub.sizing.estimate_ram uses for an installed model.
OVERHEAD_BYTES = 300 * 1024 * 1024  # runtime, tokenizer, activations, allocator slack
KV_BYTES_PER_VALUE = 4  # the KV cache holds float32

_FIELDS: dict[str, type] = {
    "id": str, "name": str, "repo": str, "file": str, "size_bytes": int, "license": str,
    "parameters": int, "architecture": str, "quant": str, "context_length": int,
    "layers": int, "kv_heads": int, "head_dim": int, "ram_bytes_4k": int,
}


@dataclass(frozen=True)
class CatalogEntry:
    id: str  # also the name the model is installed under
    name: str  # what people call it
    repo: str  # Hugging Face repository
    file: str  # the GGUF file in it
    size_bytes: int
    license: str
    parameters: int
    architecture: str  # HF model_type, one Wren runs
    quant: str
    context_length: int
    layers: int
    kv_heads: int
    head_dim: int
    ram_bytes_4k: int  # file + float32 KV for 4,096 tokens + runtime overhead
    notes: str = ""
    active_parameters: int = 0  # a mixture of experts: what one token reads; 0: all of them
    fits: bool = True  # computed for this computer
    shortfall_bytes: int = 0  # how much more RAM it would need; 0 when it fits
    installed: bool = False  # computed from the installed models

    @property
    def spec(self) -> str:
        """What `engine.models.pull` takes for this entry (its id)."""
        return self.id


def kv_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int = KV_TOKENS) -> int:
    """A float32 key and value cache for `tokens` positions."""
    return 2 * layers * kv_heads * head_dim * tokens * KV_BYTES_PER_VALUE


def ram_needed(size_bytes: int, layers: int, kv_heads: int, head_dim: int) -> int:
    return size_bytes + kv_bytes(layers, kv_heads, head_dim) + OVERHEAD_BYTES


def load_catalog(path: Path | None = None) -> list[CatalogEntry]:
    """The catalog's entries, checked; a malformed file raises ModelFileError naming the entry."""
    try:
        if path is None:
            text = resources.files("wren.resources").joinpath(CATALOG_RESOURCE).read_text(encoding="utf-8")
            where = f"resources/{CATALOG_RESOURCE}"
        else:
            text, where = Path(path).read_text(encoding="utf-8"), str(path)
        doc = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"the model catalog cannot be read: {exc}") from exc
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list):
        raise ModelFileError(f"{where} has no list of models")
    entries, seen = [], set()
    for index, raw in enumerate(models):
        entry = _entry(raw, f"{where} entry {index}")
        if entry.id in seen:
            raise ModelFileError(f"{where} lists {entry.id!r} twice")
        seen.add(entry.id)
        entries.append(entry)
    return entries


def _entry(raw: Any, where: str) -> CatalogEntry:
    if not isinstance(raw, dict):
        raise ModelFileError(f"{where} is not an object")
    values: dict[str, Any] = {}
    for key, kind in _FIELDS.items():
        value = raw.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or value in ("", 0) or (isinstance(value, int) and value < 0):
            raise ModelFileError(f"{where}: {key!r} must be a non-empty {kind.__name__}, got {value!r}")
        values[key] = value
    if families.find_model_type(values["architecture"]) is None:
        raise ModelFileError(
            f"{where}: architecture {values['architecture']!r} is not one Wren runs "
            f"({', '.join(families.model_types())})"
        )
    if not values["file"].endswith(".gguf") or "/" not in values["repo"]:
        raise ModelFileError(f"{where}: expected a Hugging Face repo (owner/name) and a .gguf file")
    active = raw.get("active_parameters", 0)
    if not isinstance(active, int) or isinstance(active, bool) or not 0 <= active <= values["parameters"]:
        raise ModelFileError(f"{where}: 'active_parameters' must be a whole number up to 'parameters', got {active!r}")
    return CatalogEntry(**values, notes=str(raw.get("notes", "")), active_parameters=active)


def with_fit(entry: CatalogEntry, total_ram: int, installed: bool) -> CatalogEntry:
    usable = int(total_ram * FIT_SHARE)
    shortfall = max(0, entry.ram_bytes_4k - usable)
    return replace(entry, fits=shortfall == 0, shortfall_bytes=shortfall, installed=installed)


def system_memory_bytes() -> int:
    """This computer's physical memory in bytes (0 when it cannot be told)."""
    try:
        import psutil  # type: ignore[import-not-found]

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    if sys.platform == "win32":
        return _windows_memory()
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _windows_memory() -> int:
    import ctypes

    class MemoryStatus(ctypes.Structure):
        _fields_ = [
            ("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
            ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
            ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
            ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
            ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
        ]

    status = MemoryStatus()
    status.dwLength = ctypes.sizeof(MemoryStatus)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        return 0
    return int(status.ullTotalPhys)
