"""`wren providers add|list|rm|test`: OpenAI-compatible servers Wren can answer through.

The key is read from the terminal without echo (or from standard input when that is not a
terminal) and goes to the OS keyring; where there is none (headless Linux) Wren says so
and offers an encrypted file (`--key-store file`) or an environment variable
(`--key-store env`). Keys are never printed and never written as plain text.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys

from ..errors import WrenError
from ..providers.keys import KEY_STORES, PASSPHRASE_ENV, env_name, passphrase_from_env


def register(subparsers: argparse._SubParsersAction) -> None:
    prov = subparsers.add_parser("providers", help="remote OpenAI-compatible servers (vLLM, Ollama, OpenAI, another Wren)")
    actions = prov.add_subparsers(dest="action", required=True)
    p = actions.add_parser("add", help="add a provider; its key is asked for and kept in the OS keyring")
    p.add_argument("name", help="a short name; its models are then chosen as NAME/MODEL")
    p.add_argument("--base-url", required=True, help="the API root, e.g. https://api.example.com/v1")
    p.add_argument("--model", action="append", default=[], help="a model to offer (repeatable); "
                   "default: the models the server lists")
    p.add_argument("--key-store", choices=KEY_STORES, default="auto",
                   help="where the key lives: the OS keyring (auto/system), an encrypted file (file), "
                        "an environment variable (env), or no key (none)")
    p.add_argument("--key-env", help="with --key-store env: the variable (default WREN_KEY_<NAME>)")
    p.add_argument("--no-key", action="store_true", help="the server needs no key (do not ask for one)")
    p.add_argument("--allow-http", action="store_true",
                   help="allow plain http:// to a machine other than this one (key and chats unencrypted)")
    p.add_argument("--context-length", type=int, help="the model's context window in tokens "
                   "(default: what the server's model list says, else 8192)")
    p.set_defaults(func=_add)
    p = actions.add_parser("list", help="the providers and their models (never their keys)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_list)
    p = actions.add_parser("rm", help="remove a provider and its stored key")
    p.add_argument("name")
    p.set_defaults(func=_rm)
    p = actions.add_parser("test", help="reach the server, list its models and ask for a one-word answer")
    p.add_argument("name")
    p.add_argument("--model", help="the model to try (default: the provider's first)")
    p.set_defaults(func=_test)


def _run(coro_fn) -> int:
    async def main() -> int:
        from ..api import Engine

        engine = Engine.open()
        try:
            return await coro_fn(engine)
        finally:
            await engine.close()

    try:
        return asyncio.run(main())
    except WrenError as exc:
        print(f"wren providers: {exc}", file=sys.stderr)
        return 1


def _read_secret(prompt: str) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    return line.strip()


def _add(args) -> int:
    key, passphrase = None, None
    store = "none" if args.no_key else args.key_store
    if store == "env":
        variable = args.key_env or env_name(args.name)
        print(f"The key will be read from ${variable} whenever Wren uses {args.name}; nothing is stored.")
        args.key_env = variable
    elif store != "none":
        if store == "auto":
            from ..providers.keys import keyring_status

            problem = keyring_status()
            if problem is not None:
                print(f"wren providers: {problem}", file=sys.stderr)
                print("Run again with --key-store file or --key-store env (or --no-key).", file=sys.stderr)
                return 1
        key = _read_secret(f"API key for {args.name} (empty if the server needs none): ")
        if not key:
            store = "none"
        elif store == "file":
            passphrase = passphrase_from_env() or _read_secret("Passphrase of Wren's encrypted key file: ")
            if not passphrase:
                print(f"wren providers: the encrypted key file needs a passphrase (or set {PASSPHRASE_ENV})",
                      file=sys.stderr)
                return 1

    async def go(engine) -> int:
        if not args.model:  # the server is asked for its models: seconds, said first
            print(f"Asking {args.base_url} for its models…", file=sys.stderr, flush=True)
        replaced = any(p.name == args.name for p in await engine.providers.list())
        info = await engine.providers.add(
            args.name, args.base_url, api_key=key, models=args.model, key_store=store, key_env=args.key_env,
            allow_http=args.allow_http, context_length=args.context_length, passphrase=passphrase)
        where = {"system": "the OS keyring", "file": "the encrypted key file", "env": f"${info.key_env}",
                 "none": "no key"}[info.key_store]
        print(f"{'Replaced' if replaced else 'Added'} {info.name} ({info.base_url}); key: {where}.")
        if info.models:
            print("Models: " + ", ".join(f"{info.name}/{m}" for m in info.models))
        else:
            why = engine.providers.discovery_errors.get(info.name)
            print(f"No models known yet{f' (it could not list them: {why})' if why else ''}: pass --model, "
                  f"or run `wren providers test {info.name}`.")
        return 0

    return _run(go)


def _list(args) -> int:
    async def go(engine) -> int:
        providers = await engine.providers.list()
        for p in providers:
            if args.json:
                print(json.dumps(p.to_dict()))
            else:
                models = ", ".join(p.models) or "(none known)"
                print(f"{p.name:16} {p.base_url:40} key: {p.key_store:6} models: {models}")
        if not providers and not args.json:
            print("No providers. Add one with `wren providers add NAME --base-url URL`.")
        return 0

    return _run(go)


def _rm(args) -> int:
    async def go(engine) -> int:
        await engine.providers.remove(args.name)
        print(f"Removed {args.name} and its stored key.")
        return 0

    return _run(go)


def _test(args) -> int:
    async def go(engine) -> int:
        check = await engine.providers.test(args.name, model=args.model)
        print(f"{check.name}: reachable; it lists {len(check.models)} model(s)"
              + (": " + ", ".join(check.models[:10]) if check.models else ""))
        if check.answered is not None:
            print(f"Test answer: {check.answered.strip()!r} ({check.seconds:.2f} s)")
        return 0

    return _run(go)
