"""Sampling settings and the one sampler every backend shares (numpy, on host)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from engine.errors import InvalidRequest


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int = 1024
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))
        self.validate()

    def validate(self) -> None:
        problems = []
        if not (0.0 <= self.temperature <= 5.0):
            problems.append(f"temperature must be between 0 and 5, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be 0 (off) or positive, got {self.top_k}")
        if not (0.0 <= self.min_p < 1.0):
            problems.append(f"min_p must be in [0, 1), got {self.min_p}")
        if not (0.0 < self.repetition_penalty <= 5.0):
            problems.append(
                f"repetition_penalty must be in (0, 5], got {self.repetition_penalty}"
            )
        if self.seed is not None and not (0 <= self.seed < 2**63):
            problems.append(f"seed must be a non-negative integer, got {self.seed}")
        if not (1 <= self.max_tokens <= 1_000_000):
            problems.append(f"max_tokens must be at least 1, got {self.max_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            problems.append("stop strings must be non-empty strings")
        if problems:
            raise InvalidRequest("invalid sampling settings: " + "; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "SamplingParams":
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidRequest(f"unknown sampling settings: {', '.join(sorted(unknown))}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise InvalidRequest(f"invalid sampling settings: {exc}") from None

    def with_(self, **changes) -> "SamplingParams":
        return replace(self, **changes)
