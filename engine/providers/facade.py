"""The Engine's remote-provider half: add, list, test and remove providers, list their
models beside the local ones, and load one as the answering model ("provider/model")."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import NotFound, WrenError
from ..inference.backends.remote import (
    DEFAULT_CONTEXT,
    RemoteBackend,
    RemoteError,
    RemoteSpec,
    RemoteWorker,
    Transport,
)
from ..logs import log_event
from . import keys
from .config import (
    ProviderInfo,
    RemoteModelInfo,
    check_provider,
    drop_provider,
    load_providers,
    remote_models,
    save_provider,
    split_remote,
)

if TYPE_CHECKING:
    from ..api import ModelStatus
    from ..inference.worker import ModelWorker
    from ..store import Store


@dataclass(frozen=True)
class ProviderCheck:
    """What `test_provider` found: the models the server lists and whether a short answer
    came back."""

    name: str
    models: tuple[str, ...]
    answered: str | None  # the test answer's text, None when no model was tried
    seconds: float


class Providers:
    """Mixed into `Engine`; relies on its store, `_db`, registry, tokenizer factory,
    policy and model state (`_worker`, `_status`, `_assemblers`, `_unload`)."""

    store: Store
    _worker: ModelWorker | None  # Engine's; a RemoteWorker stands in for one (the same calls)
    _status: ModelStatus | None
    # Tests and benchmarks set these: an httpx transport and the client's patience.
    remote_http_transport: Any = None
    remote_transport: Transport | None = None

    async def list_providers(self) -> list[ProviderInfo]:
        return list((await self._db(load_providers, self.store)).values())

    def key_storage_problem(self) -> str | None:
        """None where the OS keyring works; else what to tell the user (headless Linux)."""
        return keys.keyring_status()

    async def add_provider(self, name: str, base_url: str, *, api_key: str | None = None,
                           models: tuple[str, ...] | list[str] = (), key_store: str = "auto",
                           key_env: str | None = None, allow_http: bool = False,
                           context_length: int | None = None, passphrase: str | None = None,
                           discover: bool = True) -> ProviderInfo:
        """Save a provider and its key. key_store "auto" is the OS keyring and fails, saying
        what else to choose, where there is none; "file" needs `passphrase` (or
        WREN_KEYRING_PASSPHRASE); "env" reads the key from `key_env` when used; without a key
        it is "none". With no `models` and discover=True the server's list is asked for."""
        loop = asyncio.get_running_loop()
        if key_store == "env":
            store = "env"
        elif not api_key:
            store = "none"
        else:
            store = await loop.run_in_executor(None, keys.resolve_store, key_store)
        info = ProviderInfo(name, base_url, tuple(models), store, key_env, allow_http, context_length)
        info = check_provider(info)
        if not info.models and discover:
            try:
                key = api_key if store != "env" else await self._provider_key(info)
                found = await self._server_models(info, key)
            except WrenError:
                found = []  # saved anyway; `test_provider` says what is wrong
            info = replace(info, models=tuple(found))
        if store in ("system", "file") and api_key:
            await loop.run_in_executor(None, lambda: keys.save_key(name, api_key, store, passphrase=passphrase))
        saved = await self._db(save_provider, self.store, info)
        log_event("provider.added", provider=name, key_store=store, models=len(saved.models))
        return saved

    async def remove_provider(self, name: str) -> None:
        info = await self._db(drop_provider, self.store, name)
        if info is None:
            raise NotFound(f"there is no provider named {name!r}")
        current = self._status
        if current is not None and current.name.startswith(name + "/"):
            await self.unload_model()
        await asyncio.get_running_loop().run_in_executor(None, lambda: keys.delete_key(name, info.key_store))
        log_event("provider.removed", provider=name)

    async def test_provider(self, name: str, *, model: str | None = None, passphrase: str | None = None) -> ProviderCheck:
        """Ask the server for its models and, with a model (given, or the provider's first),
        for a very short answer. Raises RemoteError / KeyStoreError saying what failed; a
        provider with no models saved gets the server's list saved."""
        providers = await self._db(load_providers, self.store)
        info = providers.get(name)
        if info is None:
            raise NotFound(f"there is no provider named {name!r}")
        key = await self._provider_key(info, passphrase)
        started = time.perf_counter()
        found = await self._server_models(info, key)
        if not info.models and found:
            await self._db(save_provider, self.store, replace(info, models=tuple(found)))
        model = model or (info.models[0] if info.models else (found[0] if found else None))
        answered = None
        if model is not None:
            from ..inference.sampling import SamplingParams

            client = self._backend_for(info, model, key).load(None).client
            try:
                parts = []
                async for chunk in client.stream_chat(model, [{"role": "user", "content": "Reply with the word OK."}],
                                                      SamplingParams(temperature=0.0, max_tokens=8)):
                    parts.append(chunk.text)
                answered = "".join(parts)
            finally:
                await client.aclose()
        return ProviderCheck(name, tuple(found), answered, time.perf_counter() - started)

    async def remote_models(self) -> list[RemoteModelInfo]:
        """Every configured provider's models, named "provider/model"."""
        return remote_models(await self._db(load_providers, self.store), DEFAULT_CONTEXT)

    # -- loading ---------------------------------------------------------------------

    async def _provider_key(self, info: ProviderInfo, passphrase: str | None = None) -> str | None:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: keys.read_key(info.name, info.key_store, env=info.key_env, passphrase=passphrase))

    def _backend_for(self, info: ProviderInfo, model: str, key: str | None) -> RemoteBackend:
        return RemoteBackend(RemoteSpec(info.name, model, info.base_url, key, info.allow_http, info.context_length,
                                        self.remote_transport, self.remote_http_transport))

    async def _server_models(self, info: ProviderInfo, key: str | None) -> list[str]:
        client = self._backend_for(info, "", key).load(None).client
        try:
            return [m["id"] for m in await client.list_models()]
        finally:
            await client.aclose()

    async def _remote_tokenizer(self):
        """A local tokenizer to budget a remote model's context and count its tokens when
        the server reports none: the default local model's, else the starter's. Counts are
        approximate (another model's vocabulary)."""
        loop = asyncio.get_running_loop()
        providers = await self._db(load_providers, self.store)
        chosen = await self.get_setting("model")
        info = None
        if chosen and split_remote(chosen, providers) is None:
            try:
                info = await loop.run_in_executor(None, self.registry.get, chosen)
            except WrenError:
                info = None
        if info is None:
            info = await loop.run_in_executor(None, self.registry.ensure_starter)
        return await loop.run_in_executor(None, self._tokenizer_factory, info.path)

    async def _load_remote(self, name: str | None):
        """Load `name` as a remote model if it is "provider/model" of a configured
        provider: the ModelStatus; else None (a local model). Call under the load lock."""
        providers = await self._db(load_providers, self.store)
        found = split_remote(name, providers)
        if found is None:
            return None
        info, model = found
        from ..api import ModelStatus

        started = time.perf_counter()
        key = await self._provider_key(info)
        tokenizer = await self._remote_tokenizer()
        await self._unload()
        worker = RemoteWorker(name, self._backend_for(info, model, key), tokenizer, policy=self.policy)
        try:
            loaded = await asyncio.wrap_future(worker.loaded)
        except BaseException:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
            raise
        loop = asyncio.get_running_loop()
        self._assemblers = await loop.run_in_executor(None, self._make_assemblers, tokenizer)
        self._worker = worker  # type: ignore[assignment]  # RemoteWorker: ModelWorker's interface, duck-typed
        self._status = ModelStatus(name, loaded.backend, loaded.context_length, time.perf_counter() - started)
        log_event("model.loaded", model=name, backend=loaded.backend, load_seconds=round(self._status.load_seconds, 3))
        return self._status


__all__ = ["ProviderCheck", "ProviderInfo", "Providers", "RemoteError", "RemoteModelInfo"]
