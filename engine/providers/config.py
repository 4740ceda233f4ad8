"""Remote providers as saved in the store's settings (key "providers"): name, base URL,
models, where the key lives. Never the key itself."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest
from ..inference.backends.remote import check_base_url
from .keys import KEY_STORES

if TYPE_CHECKING:
    from ..store import Store

SETTING_KEY = "providers"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")  # a key_env variable's name


@dataclass(frozen=True)
class ProviderInfo:
    name: str
    base_url: str
    models: tuple[str, ...] = ()
    key_store: str = "none"  # system, file, env or none (keys.KEY_STORES)
    key_env: str | None = None  # key_store "env": the variable (default WREN_KEY_<NAME>)
    allow_http: bool = False  # plain http:// to another machine, confirmed by the user
    context_length: int | None = None  # a setting; else the server's model info

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["models"] = list(self.models)
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> ProviderInfo:
        return cls(name=raw["name"], base_url=raw["base_url"], models=tuple(raw.get("models") or ()),
                   key_store=raw.get("key_store", "none"), key_env=raw.get("key_env"),
                   allow_http=bool(raw.get("allow_http", False)), context_length=raw.get("context_length"))


@dataclass(frozen=True)
class RemoteModelInfo:
    """A provider's model, shaped like the registry's ModelInfo so lists can hold both."""

    name: str  # "provider/model"
    provider: str
    model: str
    base_url: str
    context_length: int
    path: Path | None = None
    architecture: str = "remote"
    parameters: int = 0
    size_bytes: int = 0
    source: str = "remote"
    quantization: str | None = None
    remote: bool = field(default=True)


def check_provider(info: ProviderInfo) -> ProviderInfo:
    """The provider with its URL normalised, or InvalidRequest naming what is wrong."""
    if not isinstance(info.name, str) or not NAME.match(info.name):
        raise InvalidRequest(
            f"provider name {info.name!r} must start with a letter or digit and hold only letters, digits, "
            "'.', '_' or '-' (at most 63)"
        )
    try:
        url = check_base_url(info.base_url, allow_http=info.allow_http)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    if info.key_store not in KEY_STORES or info.key_store == "auto":
        raise InvalidRequest(f"key store {info.key_store!r} must be one of system, file, env, none")
    if info.key_env is not None and not ENV_NAME.match(info.key_env):
        raise InvalidRequest(f"{info.key_env!r} is not an environment variable's name (letters, digits and _, "
                             "not starting with a digit), like WREN_KEY_OFFICE_GPU")
    models = tuple(m.strip() for m in info.models if isinstance(m, str) and m.strip())
    if info.context_length is not None and (not isinstance(info.context_length, int) or info.context_length < 1):
        raise InvalidRequest(f"context length must be a positive number of tokens, got {info.context_length!r}")
    return ProviderInfo(info.name, url, tuple(dict.fromkeys(models)), info.key_store, info.key_env,
                        info.allow_http, info.context_length)


def load_providers(store: Store) -> dict[str, ProviderInfo]:
    raw = store.get_setting(SETTING_KEY, None) or {}
    out = {}
    for name, entry in raw.items() if isinstance(raw, dict) else ():
        try:
            out[name] = ProviderInfo.from_dict({**entry, "name": name})
        except (KeyError, TypeError):
            continue  # a damaged entry: left out rather than failing every list
    return out


def save_provider(store: Store, info: ProviderInfo) -> ProviderInfo:
    info = check_provider(info)
    raw = dict(store.get_setting(SETTING_KEY, None) or {})
    entry = info.to_dict()
    entry.pop("name")
    raw[info.name] = entry
    store.set_setting(SETTING_KEY, raw)
    return info


def drop_provider(store: Store, name: str) -> ProviderInfo | None:
    raw = dict(store.get_setting(SETTING_KEY, None) or {})
    entry = raw.pop(name, None)
    if entry is None:
        return None
    store.set_setting(SETTING_KEY, raw)
    return ProviderInfo.from_dict({**entry, "name": name})


def split_remote(name: str | None, providers: dict[str, ProviderInfo]) -> tuple[ProviderInfo, str] | None:
    """("provider/model" of a configured provider) -> (provider, model); else None."""
    if not name or "/" not in name:
        return None
    provider, model = name.split("/", 1)
    info = providers.get(provider)
    if info is None or not model:
        return None
    return info, model


def remote_models(providers: dict[str, ProviderInfo], default_context: int) -> list[RemoteModelInfo]:
    return [
        RemoteModelInfo(f"{p.name}/{m}", p.name, m, p.base_url, p.context_length or default_context)
        for p in providers.values() for m in p.models
    ]
