"""Settings: the app's stored settings and the typed ones built on them (what the model is
told, the context budget, speed and memory, the terminal's keep-alive), the sampling an
answer gets, and the diagnostics the settings pages offer. A service of the Engine
(`engine.settings`); every call runs off the caller's loop thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paths
from .context import ContextSettings, Instructions, load_instructions, load_settings, save_instructions
from .context.settings import SETTING_KEY as CONTEXT_KEY
from .errors import InvalidRequest, WrenError
from .inference.presets import PRESETS_KEY, check_presets, layered, model_defaults
from .inference.sampling import SamplingParams
from .inference.speculative import DRAFT_MODELS_KEY, DRAFTER_KEY
from .inference.speculative import check_setting as check_speculation
from .keep_alive import DEFAULT_KEEP_ALIVE, KEEP_ALIVE_SETTING
from .keep_alive import seconds as keep_alive_seconds
from .modelhub.registry import STARTER_NAME
from .performance import PARALLEL_KEY, PREFIX_CACHE_KEY, PerformanceSettings

if TYPE_CHECKING:
    from .core import Core


class Settings:
    """`engine.settings`."""

    def __init__(self, core: Core):
        self.e = core

    async def get(self, key: str, default: Any = None) -> Any:
        return await self.e.db(self.e.store.get_setting, key, default)

    async def set(self, key: str, value: Any) -> None:
        """Save a setting (None clears it); bad sampling defaults are refused, not saved."""
        if key == "sampling" and value is not None:
            SamplingParams.from_dict(value)
        if key == PRESETS_KEY:
            check_presets(value)
        if key in (DRAFTER_KEY, DRAFT_MODELS_KEY):
            check_speculation(key, value)
        await self.e.db(self.e.store.set_setting, key, value)

    async def default_sampling(self, model: str | None = None, *, overrides: dict | None = None,
                               preset: bool = True) -> SamplingParams:
        """The sampling settings for an answer from `model` (default: the loaded model, else the
        chosen one): Wren's built-in defaults, overlaid field by field by the model's own (its
        card's advice, then its generation_config.json), the settings for every model (setting
        "sampling"), this model's preset (setting "sampling.models"; left out with
        preset=False, which gives what "reset to model defaults" shows) and `overrides` (a
        conversation's own)."""
        if model is None:
            model = (self.e.model_status.name if self.e.model_status else None) or await self.get("model") or STARTER_NAME
        loop = asyncio.get_running_loop()
        try:
            folder = (await loop.run_in_executor(None, self.e.registry.get, model)).path
        except WrenError:
            folder = None  # not installed (yet): it has no config of its own to read
        generation = await loop.run_in_executor(None, model_defaults, model, folder)
        saved = await self.e.db(self.e.store.get_settings, "sampling", PRESETS_KEY)  # both in one trip
        return layered(model, generation, saved.get("sampling"), saved.get(PRESETS_KEY), overrides, preset=preset)

    # -- what the model is told --------------------------------------------------------

    async def instructions(self) -> Instructions:
        return await self.e.db(load_instructions, self.e.store)

    async def set_instructions(self, about_me: str, how_to_respond: str) -> Instructions:
        value = Instructions(about_me=about_me, how_to_respond=how_to_respond)
        await self.e.db(save_instructions, self.e.store, value)
        return value

    async def context(self) -> ContextSettings:
        return await self.e.db(load_settings, self.e.store)

    async def set_context(self, **values: Any) -> ContextSettings:
        current = (await self.context()).to_dict()
        settings = ContextSettings.from_dict({**current, **values})  # refuses bad values
        await self.e.db(self.e.store.set_setting, CONTEXT_KEY, settings.to_dict())
        return settings

    # -- speed and memory ----------------------------------------------------------------

    async def performance(self) -> PerformanceSettings:
        """A stored value that is no longer valid (edited by hand) falls back to the default."""
        parallel = await self.get(PARALLEL_KEY)
        prefix_mb = await self.get(PREFIX_CACHE_KEY)
        try:
            return PerformanceSettings.from_stored(parallel, prefix_mb)
        except InvalidRequest:
            return PerformanceSettings()

    async def set_performance(self, **values: Any) -> PerformanceSettings:
        """parallel_sequences=, prefix_cache_mb=; a bad value is refused with what was wrong.
        They take effect when a model next loads."""
        settings = PerformanceSettings(**{**(await self.performance()).to_dict(), **values})
        await self.set(PARALLEL_KEY, settings.parallel_sequences)
        await self.set(PREFIX_CACHE_KEY, settings.prefix_cache_mb)
        return settings

    async def terminal_keep_alive(self) -> float:
        """Seconds `wren ask`'s resident engine keeps the model loaded after a question
        (the setting; 0: each question is answered in its own process)."""
        return keep_alive_seconds(await self.get(KEEP_ALIVE_SETTING, DEFAULT_KEEP_ALIVE))

    async def set_terminal_keep_alive(self, value: float) -> None:
        """Takes effect at the resident engine's next idle moment, and for every `wren ask`
        without --keep-alive or WREN_KEEP_ALIVE."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise InvalidRequest(f"the terminal's keep-alive must be 0 or more seconds, got {value!r}")
        await self.set(KEEP_ALIVE_SETTING, value)

    # -- diagnostics ---------------------------------------------------------------------

    def logs_folder(self) -> Path:
        return paths.logs_dir()

    async def diagnostics_bundle(self) -> bytes:
        """A zip of the redacted logs and system facts, for a support request."""
        from .logs import diagnostics_bundle

        return await asyncio.get_running_loop().run_in_executor(None, diagnostics_bundle)
