"""Settings → Memory: stored as one JSON object under the `memory` setting."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from ..errors import InvalidRequest
from ..store.memories import setting_text

SETTING_KEY = "memory"
TEMPORARY_KEY = "temporary"  # conversation.settings[TEMPORARY_KEY] marks a temporary chat


@dataclass(frozen=True)
class MemorySettings:
    enabled: bool = True  # use and create memories at all
    reference_history: bool = False  # also retrieve from past conversations' messages
    suggest: bool = False  # propose self-stated facts after a turn, for the user to accept
    top_k: int = 5  # memories per turn at most
    past_chat_items: int = 3  # excerpts from past conversations per turn at most

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> MemorySettings:
        """Unknown keys are ignored (a newer Wren's settings); bad values are refused."""
        data = data or {}
        known = {f.name: f for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key, value in values.items():
            kind = bool if known[key].type in ("bool", bool) else int
            if kind is bool and not isinstance(value, bool):
                raise InvalidRequest(f"memory setting {key!r} must be true or false, not {value!r}")
            if kind is int and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 50):
                raise InvalidRequest(f"memory setting {key!r} must be a whole number from 0 to 50, not {value!r}")
        return cls(**values)

    def with_(self, **changes) -> MemorySettings:
        return MemorySettings.from_dict({**self.to_dict(), **changes})


def load(store) -> MemorySettings:
    # Raw SQL (there): read every turn, and peewee's query building costs more than the read.
    text = setting_text(store.db, SETTING_KEY)
    return MemorySettings.from_dict(json.loads(text) if text else None)


def save(store, settings: MemorySettings) -> None:
    store.set_setting(SETTING_KEY, settings.to_dict())


def is_temporary(conversation_settings: dict | None) -> bool:
    return bool((conversation_settings or {}).get(TEMPORARY_KEY))
