"""The Engine's remote-provider half: add, list, test and remove providers, list their
models beside the local ones, and load one as the answering model ("provider/model")."""

from __future__ import annotations

import asyncio
import builtins
import logging
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
from ..records import ModelStatus
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
    from ..core import Core
    from ..settings import Settings


@dataclass(frozen=True)
class ProviderCheck:
    """What `test_provider` found: the models the server lists and whether a short answer
    came back."""

    name: str
    models: tuple[str, ...]
    answered: str | None  # the test answer's text, None when no model was tried
    seconds: float


log = logging.getLogger(__name__)

# Test is a question the user waits on: one retry and a short connect wait, not an answer's
# four retries with backoff (a closed port took 8-28 s to say so).
TEST_TRANSPORT = Transport(connect_timeout=5.0, chunk_timeout=15.0, retries=1, backoff=0.25)


class Providers:
    """`engine.providers`: remote OpenAI-compatible servers, their keys and models, and
    loading one of their models as the answering one."""

    def __init__(self, core: Core, settings: Settings):
        self.e = core
        self.settings = settings
        # Tests and benchmarks set these: an httpx transport and the client's patience.
        self.remote_http_transport: Any = None
        self.remote_transport: Transport | None = None
        # why add() could not list a provider's models (saved anyway), by provider, for the
        # front ends to say; cleared when a later add lists them
        self.discovery_errors: dict[str, str] = {}

    async def list(self) -> builtins.list[ProviderInfo]:
        return list((await self.e.db(load_providers, self.e.store)).values())

    def key_storage_problem(self) -> str | None:
        """None where the OS keyring works; else what to tell the user (headless Linux)."""
        return keys.keyring_status()

    async def add(self, name: str, base_url: str, *, api_key: str | None = None,
                           models: tuple[str, ...] | builtins.list[str] = (), key_store: str = "auto",
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
                found = await self._server_models(info, key, self.remote_transport or TEST_TRANSPORT)
            except WrenError as exc:
                found = []  # saved anyway; the reason is kept for the front end to say
                self.discovery_errors[name] = str(exc)
            else:
                self.discovery_errors.pop(name, None)
            info = replace(info, models=tuple(found))
        before = (await self.e.db(load_providers, self.e.store)).get(name)
        if store in ("system", "file") and api_key:
            await loop.run_in_executor(None, lambda: keys.save_key(name, api_key, store, passphrase=passphrase))
        saved = await self.e.db(save_provider, self.e.store, info)
        if before is not None and before.key_store in ("system", "file") and before.key_store != store:
            # replaced: the old key is not left behind in a store the provider no longer reads
            try:
                await loop.run_in_executor(None, lambda: keys.delete_key(name, before.key_store,
                                                                         passphrase=passphrase))
            except WrenError as exc:
                log.warning("the replaced provider %s's old key could not be deleted: %s", name, exc)
        log_event("provider.added", provider=name, key_store=store, models=len(saved.models))
        return saved

    async def remove(self, name: str) -> None:
        info = await self.e.db(drop_provider, self.e.store, name)
        if info is None:
            raise NotFound(f"there is no provider named {name!r}")
        current = self.e.model_status
        if current is not None and current.name.startswith(name + "/"):
            await self.e.unload()
        await asyncio.get_running_loop().run_in_executor(None, lambda: keys.delete_key(name, info.key_store))
        log_event("provider.removed", provider=name)

    async def test(self, name: str, *, model: str | None = None, passphrase: str | None = None) -> ProviderCheck:
        """Ask the server for its models and, with a model (given, or the provider's first),
        for a very short answer. Raises RemoteError / KeyStoreError saying what failed; a
        provider with no models saved gets the server's list saved."""
        providers = await self.e.db(load_providers, self.e.store)
        info = providers.get(name)
        if info is None:
            raise NotFound(f"there is no provider named {name!r}")
        key = await self._provider_key(info, passphrase)
        started = time.perf_counter()
        patience = self.remote_transport or TEST_TRANSPORT
        found = await self._server_models(info, key, patience)
        if not info.models and found:
            await self.e.db(save_provider, self.e.store, replace(info, models=tuple(found)))
        model = model or (info.models[0] if info.models else (found[0] if found else None))
        answered = None
        if model is not None:
            from ..inference.sampling import SamplingParams

            client = self._backend_for(info, model, key, patience).load(None).client
            try:
                parts = []
                async for chunk in client.stream_chat(model, [{"role": "user", "content": "Reply with the word OK."}],
                                                      SamplingParams(temperature=0.0, max_tokens=8)):
                    parts.append(chunk.text)
                answered = "".join(parts)
            finally:
                await client.aclose()
        return ProviderCheck(name, tuple(found), answered, time.perf_counter() - started)

    async def models(self) -> builtins.list[RemoteModelInfo]:
        """Every configured provider's models, named "provider/model"."""
        return remote_models(await self.e.db(load_providers, self.e.store), DEFAULT_CONTEXT)

    # -- loading ---------------------------------------------------------------------

    async def _provider_key(self, info: ProviderInfo, passphrase: str | None = None) -> str | None:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: keys.read_key(info.name, info.key_store, env=info.key_env, passphrase=passphrase))

    def _backend_for(self, info: ProviderInfo, model: str, key: str | None,
                     transport: Transport | None = None) -> RemoteBackend:
        return RemoteBackend(RemoteSpec(info.name, model, info.base_url, key, info.allow_http, info.context_length,
                                        transport or self.remote_transport, self.remote_http_transport))

    async def _server_models(self, info: ProviderInfo, key: str | None,
                             transport: Transport | None = None) -> builtins.list[str]:
        client = self._backend_for(info, "", key, transport).load(None).client
        try:
            return [m["id"] for m in await client.list_models()]
        finally:
            await client.aclose()

    async def _remote_tokenizer(self):
        """A local tokenizer to budget a remote model's context and count its tokens when
        the server reports none: the default local model's, else the starter's. Counts are
        approximate (another model's vocabulary)."""
        loop = asyncio.get_running_loop()
        providers = await self.e.db(load_providers, self.e.store)
        chosen = await self.settings.get("model")
        info = None
        if chosen and split_remote(chosen, providers) is None:
            try:
                info = await loop.run_in_executor(None, self.e.registry.get, chosen)
            except WrenError:
                info = None
        if info is None:
            info = await loop.run_in_executor(None, self.e.registry.ensure_starter)
        return await loop.run_in_executor(None, self.e.tokenizer_factory, info.path)

    async def load_remote(self, name: str | None) -> ModelStatus | None:
        """Load `name` as a remote model if it is "provider/model" of a configured
        provider: the ModelStatus; else None (a local model). Call under the load lock."""
        providers = await self.e.db(load_providers, self.e.store)
        found = split_remote(name, providers)
        if found is None or name is None:
            return None
        info, model = found
        started = time.perf_counter()
        key = await self._provider_key(info)
        tokenizer = await self._remote_tokenizer()
        await self.e.unload_current()
        worker = RemoteWorker(name, self._backend_for(info, model, key), tokenizer, policy=self.e.policy)
        try:
            loaded = await asyncio.wrap_future(worker.loaded)
        except BaseException:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
            raise
        status = ModelStatus(name, loaded.backend, loaded.context_length, time.perf_counter() - started)
        await self.e.install_model(worker, status, tokenizer)  # type: ignore[arg-type]  # ModelWorker's interface, duck-typed
        log_event("model.loaded", model=name, backend=loaded.backend, load_seconds=round(status.load_seconds, 3))
        return status


__all__ = ["ProviderCheck", "ProviderInfo", "Providers", "RemoteError", "RemoteModelInfo"]
