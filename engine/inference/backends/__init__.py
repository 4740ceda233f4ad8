"""Inference backends; each file keeps its heavy imports (torch, mlx) to itself."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import ModelFileError


def read_model_config(model_dir: Path) -> dict:
    """config.json of an HF model folder, or ModelFileError naming the file and the fault."""
    path = Path(model_dir) / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelFileError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path} cannot be read: {exc}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path} is not valid JSON (truncated?): {exc}") from None
    if not isinstance(config, dict):
        raise ModelFileError(f"{path} does not hold a JSON object")
    return config
