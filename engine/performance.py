"""Settings that trade memory for speed: how many answers decode together, and how much
memory keeps other conversations' prompts ready (the prefix cache)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .errors import InvalidRequest

PARALLEL_KEY = "parallel_sequences"
PREFIX_CACHE_KEY = "kv_cache_budget_mb"
MAX_PARALLEL = 8
MAX_PREFIX_CACHE_MB = 65_536


@dataclass(frozen=True)
class PerformanceSettings:
    # KV-cache slots: the visible answer plus side work (a title, a summary, a quick
    # prompt) decoded in shared steps. Each slot holds a full context of cache.
    parallel_sequences: int = 2
    # Saved KV states of conversations not on screen, reused when they come back.
    prefix_cache_mb: int = 512

    def __post_init__(self) -> None:
        _check_int("parallel_sequences", self.parallel_sequences, 1, MAX_PARALLEL)
        _check_int("prefix_cache_mb", self.prefix_cache_mb, 0, MAX_PREFIX_CACHE_MB)

    @classmethod
    def from_stored(cls, parallel: Any, prefix_mb: Any) -> PerformanceSettings:
        """From the two stored settings; an unset one takes its default."""
        defaults = cls()
        return cls(defaults.parallel_sequences if parallel is None else parallel,
                   defaults.prefix_cache_mb if prefix_mb is None else prefix_mb)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidRequest(f"{name} must be from {lo} to {hi}, got {value}")
