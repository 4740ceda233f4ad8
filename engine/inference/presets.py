"""Where an answer's sampling settings come from, and each model's saved preset.

Layers, later ones winning field by field: Wren's built-in defaults; the model's own (what
its generation_config.json, where the import put what its card recommends); the user's settings for every model
(setting "sampling"); the user's preset for this model (setting "sampling.models", model
name -> fields); a conversation's own settings; options given with one message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from .sampling import SamplingParams

log = logging.getLogger(__name__)

PRESETS_KEY = "sampling.models"  # setting: {model name: {field: value}}

# The fields a per-model preset edits in Settings; a preset may hold any sampling field.
PRESET_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")

# Cut the tail of the distribution three ways (a model's long tail of unlikely tokens is
# where a small model's answers wander off into another language or into loops), make the
# answer's recently used tokens a little less likely, and stop repeats of whole runs of text
# (DRY, with its usual base 1.75 and allowed length 2). On the starter (SmolLM2-135M, five
# everyday prompts x seeds 1-2, 300 tokens) the most any run of 8 tokens recurred in one
# answer was 13 with temperature 0.7 alone (a poem), 3 with these but no DRY, 1 with DRY.
# See tests/e2e/test_starter_quality.py.
BUILTIN_DEFAULTS: dict[str, Any] = {
    "temperature": 0.7,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "repetition_window": 64,
    "dry_multiplier": 0.8,
    "penalize_prompt": False,
}

GENERATION_CONFIG = "generation_config.json"
# What generation_config.json may say that Wren honours (Hugging Face's names are Wren's).
_FROM_GENERATION_CONFIG = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")
_FIELDS = {f.name for f in fields(SamplingParams)}


def generation_defaults(model_dir: Path | None) -> dict[str, Any]:
    """The sampling fields a model folder's generation_config.json sets. A missing file gives
    {}; an unreadable file or a value out of range is logged and left out, never fatal: the
    model still answers, with Wren's defaults for what its config could not say."""
    if model_dir is None:
        return {}
    path = Path(model_dir) / GENERATION_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}
    if not isinstance(data, dict):
        log.warning("ignoring %s: expected a JSON object, found %s", path, type(data).__name__)
        return {}
    found: dict[str, Any] = {}
    for name in _FROM_GENERATION_CONFIG:
        value = data.get(name)
        if value is None:
            continue
        try:
            SamplingParams(**{name: value})
        except InvalidRequest as exc:
            log.warning("ignoring %s in %s: %s", name, path, exc)
            continue
        found[name] = value
    return found


def model_defaults(name: str | None, model_dir: Path | None) -> dict[str, Any]:
    """A model's own defaults: what its generation_config.json says (the importer writes
    there what the GGUF records, and for the starter what its model card recommends).
    `name` is the installed model's name (unused: the folder says it all)."""
    return generation_defaults(model_dir)


def check_layer(values: Any, what: str) -> dict[str, Any]:
    """A layer of sampling fields, checked on its own: a dict naming only sampling fields,
    each valid. `what` names the layer in the error."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise InvalidRequest(f"{what} must be a mapping of sampling settings, got {type(values).__name__}")
    unknown = sorted(set(values) - _FIELDS)
    if unknown:
        raise InvalidRequest(f"{what}: unknown sampling settings: {', '.join(map(str, unknown))}")
    try:
        SamplingParams(**values)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{what}: {exc}") from None
    return dict(values)


def check_presets(value: Any) -> dict[str, dict[str, Any]]:
    """The saved per-model presets, each checked; the error names the model whose preset is wrong."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"sampling presets must map model names to settings, got {type(value).__name__}")
    out = {}
    for name, preset in value.items():
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"sampling presets: a model name must be a non-empty string, got {name!r}")
        out[name] = check_layer(preset, f"the sampling preset of model {name!r}")
    return out


def resolve(*layers: Mapping[str, Any] | None) -> SamplingParams:
    """Settings from Wren's built-in defaults overlaid by each layer in turn (None skipped)."""
    merged: dict[str, Any] = dict(BUILTIN_DEFAULTS)
    for layer in layers:
        if layer:
            merged.update(layer)
    return SamplingParams.from_dict(merged)


def layered(model: str, generation: Mapping[str, Any], saved: Any, presets: Any, overrides: Any = None, *,
            preset: bool = True) -> SamplingParams:
    """An answer's sampling from its layers, each checked: the model's own defaults
    (`generation`), the saved settings for every model (`saved`), this model's saved preset
    (from `presets`; left out with preset=False, which is what "reset to model defaults"
    shows) and `overrides` (a conversation's own)."""
    everywhere = check_layer(saved, "the saved sampling settings")
    own = check_presets(presets).get(model) if preset else None
    return resolve(generation, everywhere, own, check_layer(overrides, "the conversation's sampling settings"))


def preset_of(params: SamplingParams) -> dict[str, Any]:
    """The fields a per-model preset keeps, from full settings."""
    return {name: getattr(params, name) for name in PRESET_FIELDS}
