"""Context budget settings and the user's custom instructions (stored as settings)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..errors import InvalidRequest

SETTING_KEY = "context"
INSTRUCTIONS_KEY = "custom_instructions"  # {"about_me": str, "how_to_respond": str}
MIN_RESERVE = 256
MAX_INSTRUCTION_CHARS = 3_000  # per field; ChatGPT allows 1,500 — room for longer notes


@dataclass(frozen=True)
class ContextSettings:
    answer_reserve: int | None = None  # tokens kept for the answer; None: a quarter, >= 256
    memory_tokens: int | None = None  # retrieved memories at most; None: an eighth
    summary_tokens: int | None = None  # the running summary at most; None: an eighth
    refill: float = 0.6  # after summarizing, recent turns fill this share of their room,
    #                      so the next turns append without summarizing (and keep the prefix)

    def reserve(self, window: int) -> int:
        # A quarter of the window, at least MIN_RESERVE — but never more than half of a
        # small window, which would leave no room for the question.
        default = max(min(MIN_RESERVE, window // 2), window // 4)
        wanted = self.answer_reserve if self.answer_reserve is not None else default
        return max(1, min(wanted, window - 1))

    def memory_budget(self, window: int) -> int:
        return self.memory_tokens if self.memory_tokens is not None else window // 8

    def summary_budget(self, window: int) -> int:
        return self.summary_tokens if self.summary_tokens is not None else window // 8

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> ContextSettings:
        data = data or {}
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key in ("answer_reserve", "memory_tokens", "summary_tokens"):
            value = values.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidRequest(f"context setting {key!r} must be a whole number of tokens, not {value!r}")
        refill = values.get("refill", 0.6)
        if not isinstance(refill, (int, float)) or not 0.1 <= refill <= 1.0:
            raise InvalidRequest(f"context setting 'refill' must be between 0.1 and 1, not {refill!r}")
        return cls(**values)


@dataclass(frozen=True)
class Instructions:
    """Custom instructions: never dropped from a prompt."""

    about_me: str = ""
    how_to_respond: str = ""

    def __post_init__(self):
        for name in ("about_me", "how_to_respond"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidRequest(f"custom instruction {name!r} must be text")
            if len(value) > MAX_INSTRUCTION_CHARS:
                raise InvalidRequest(
                    f"custom instruction {name!r} has {len(value):,} characters; the limit is "
                    f"{MAX_INSTRUCTION_CHARS:,} because it goes into every prompt"
                )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Instructions:
        data = data or {}
        return cls(about_me=data.get("about_me") or "", how_to_respond=data.get("how_to_respond") or "")


def load_settings(store) -> ContextSettings:
    return ContextSettings.from_dict(store.get_setting(SETTING_KEY))


def load_instructions(store) -> Instructions:
    return Instructions.from_dict(store.get_setting(INSTRUCTIONS_KEY))


def save_instructions(store, instructions: Instructions) -> None:
    store.set_setting(INSTRUCTIONS_KEY, instructions.to_dict())
