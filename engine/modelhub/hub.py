"""The default way to fetch a model repository from the Hugging Face hub (users' machines only)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from engine.errors import ModelFileError

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
                      **extra)
    # the hub client keeps its bookkeeping inside local_dir; the model folder does not need it
    shutil.rmtree(dest / ".cache", ignore_errors=True)


def _reporting_tqdm(progress: Callable[[int, int], None]) -> type:
    """A tqdm that forwards the hub's progress (files fetched of total) to `progress`."""
    from tqdm.auto import tqdm

    class Reporting(tqdm):  # type: ignore[misc, valid-type]
        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.total:
                progress(int(self.n), int(self.total))
            return shown

    return Reporting
