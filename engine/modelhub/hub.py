"""The default way to fetch a model repository from the Hugging Face hub (users' machines only)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..errors import ModelFileError

# What a safetensors model folder needs; skips PyTorch .bin/.pt duplicates, ONNX, GGUF variants.
FOLDER_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "*.txt")


class Fetch(Protocol):
    """Put the files of `repo_id` matching `patterns` into the existing folder `dest`."""

    def __call__(self, repo_id: str, dest: Path, *, patterns: Sequence[str], revision: str | None,
                 progress: Callable[[int, int], None] | None) -> None: ...


def fetch_from_hub(repo_id: str, dest: Path, *, patterns: Sequence[str], revision: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> None:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise ModelFileError("downloading from the Hugging Face hub needs the huggingface_hub package") from exc
    extra: dict[str, Any] = {}
    if progress is not None:
        extra["tqdm_class"] = _reporting_tqdm(progress)
    snapshot_download(repo_id=repo_id, revision=revision, local_dir=str(dest), allow_patterns=list(patterns),
                      endpoint=hub_endpoint(), **extra)
    # the hub client keeps its bookkeeping inside local_dir; the model folder does not need it
    shutil.rmtree(dest / ".cache", ignore_errors=True)


def hub_endpoint() -> str:
    """The hub's address: $HF_ENDPOINT as it is now (huggingface_hub reads it once, at import,
    so a later change would otherwise be missed), else the library's default."""
    override = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/")
    if override:
        return override
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def _reporting_tqdm(progress: Callable[[int, int], None]) -> type:
    """A tqdm that forwards the hub's byte counts to `progress` and draws nothing (the caller
    shows progress its own way). huggingface_hub 1.x and later open several bars with this
    class: bytes written (forwarded), bytes received over the network ("Downloading bytes",
    skipped) and files done (forwarded only by versions that count nothing else)."""
    from tqdm.auto import tqdm

    seen_bytes = False

    class Reporting(tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            nonlocal seen_bytes
            kwargs["file"] = _Discard()
            kwargs.pop("disable", None)
            super().__init__(*args, **kwargs)
            bytes_bar = kwargs.get("unit") == "B"
            seen_bytes = seen_bytes or bytes_bar
            self._forward = (bytes_bar and not str(kwargs.get("desc", "")).startswith("Downloading bytes")) or (
                not bytes_bar and not seen_bytes
            )

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self._forward and self.total and (self.unit == "B" or not seen_bytes):
                progress(int(self.n), int(self.total))
            return shown

    return Reporting


class _Discard:
    """A file that swallows what tqdm draws."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
