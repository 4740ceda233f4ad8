"""How many tokens a remote model reads, asked of its server.

Servers say it in different places, and the one the server runs with wins over the one
the model was trained with:
- the /models entry: vLLM's `max_model_len`, OpenRouter-style `context_length`, others;
- llama.cpp's server: /props `default_generation_settings.n_ctx` (its /models entry has
  only `meta.n_ctx_train`, often far more than the server was started with);
- Ollama: /api/show, `num_ctx` in its parameters, else `<arch>.context_length`.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

OLLAMA_PORT = 11434
OLLAMA_OWNERS = ("library", "ollama")  # Ollama's /v1/models: owned_by "library" for its own models
ENTRY_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _first(values) -> int | None:
    return next((v for v in map(_positive, values) if v), None)


def context_from_info(info: dict, *, trained: bool = True) -> int | None:
    """A model's context window from a /models entry (`trained`: also llama.cpp's
    meta.n_ctx_train, the length the model was trained for, as a last resort)."""
    candidates = [info.get(k) for k in ENTRY_FIELDS]
    meta = info.get("meta")
    if isinstance(meta, dict):
        candidates += [meta.get("n_ctx")] + ([meta.get("n_ctx_train")] if trained else [])
    return _first(candidates)


def context_from_props(props: Any) -> int | None:
    """llama.cpp's /props: the context each of its slots runs with."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    inner = settings.get("n_ctx") if isinstance(settings, dict) else None
    return _first([inner, props.get("n_ctx")])


def context_from_show(show: Any) -> int | None:
    """Ollama's /api/show: a `num_ctx` parameter, else the architecture's context_length."""
    if not isinstance(show, dict):
        return None
    parameters = show.get("parameters")
    if isinstance(parameters, str):
        for line in parameters.splitlines():
            name, _, value = line.strip().partition(" ")
            if name == "num_ctx" and value.strip().isdigit():
                return _positive(int(value.strip()))
    info = show.get("model_info")
    if isinstance(info, dict):
        return _first([v for k, v in info.items() if isinstance(k, str) and k.endswith(".context_length")])
    return None


def entry_for(infos: list[dict], model: str) -> dict | None:
    """The /models entry of `model`; a server that serves one model (llama.cpp names it
    after its file) answers for it whatever it calls it."""
    found = next((m for m in infos if m.get("id") == model), None)
    return found if found is not None or len(infos) != 1 else infos[0]


def _probes(base_url: str, entry: dict | None, model: str) -> list[tuple[str, str, dict | None, Any]]:
    """The server's own routes worth asking, by what its /models entry shows it to be: only
    llama.cpp's server and Ollama get a question past /v1 (no stray requests to others)."""
    owner = entry.get("owned_by") if entry else None
    probes: list[tuple[str, str, dict | None, Any]] = []
    if entry is not None and (owner == "llamacpp" or isinstance(entry.get("meta"), dict)):
        probes.append(("GET", "/props", None, context_from_props))
    if owner in OLLAMA_OWNERS or urlsplit(base_url).port == OLLAMA_PORT:
        probes.append(("POST", "/api/show", {"model": model}, context_from_show))
    return probes


async def discover_context(client, model: str) -> int | None:
    """Ask the server behind `client` (an OpenAIClient) how long `model`'s context is;
    None when nothing it answers says so. A server that does not answer its model list (or
    the offline lock that refuses it) is asked nothing more; a route it lacks is skipped."""
    try:
        entry = entry_for(await client.list_models(), model)
    except Exception as exc:  # unreachable, refused, or no model list
        log.info("no model list from %s: %s", client.base_url, exc)
        return None
    found = context_from_info(entry, trained=False) if entry else None
    for method, path, body, read in _probes(client.base_url, entry, model):
        if found:
            break
        try:
            found = read(await client.root_json(method, path, body))
        except Exception as exc:  # not this kind of server
            log.debug("%s %s: %s", method, path, exc)
    return found or (context_from_info(entry) if entry else None)
