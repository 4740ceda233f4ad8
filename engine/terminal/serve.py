"""`wren serve`: Wren as an HTTP server (OpenAI-compatible and Wren's own endpoints).

Registered by main.py's `_extensions()`; see docs/server.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import InvalidRequest


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..inference.select import BACKEND_NAMES

    p = subparsers.add_parser(
        "serve", help="serve Wren over HTTP on 127.0.0.1 (OpenAI-compatible API and Wren's own)",
        description="Serve Wren over HTTP: /v1/chat/completions, /v1/completions, /v1/models and "
                    "/api/conversation. Every request needs `Authorization: Bearer KEY`; the key is made on "
                    "the first start and kept in the system keyring (see --show-key).")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this computer only)")
    p.add_argument("--port", type=int, default=None, help="port (default 8765; 0: any free port)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host other than loopback: other machines on the network can then reach Wren")
    p.add_argument("--show-key", action="store_true", help="print the server's API key and exit")
    p.add_argument("--new-key", action="store_true", help="replace the API key with a new one (the old stops working)")
    p.add_argument("--key-file", nargs="?", const="", default=None, metavar="PATH",
                   help="keep the key in an encrypted file protected by a passphrase (for machines without a "
                        "desktop keyring); PATH defaults to keyring's data folder, never Wren's")
    p.add_argument("--max-queue", type=int, default=None,
                   help="answers running or waiting at once (default 16); beyond it: 429 with Retry-After")
    p.add_argument("--max-body", type=_size, default=None, metavar="SIZE",
                   help="largest request body, in bytes or with K/M (default 8M); larger: 413")
    p.add_argument("--write-timeout", type=float, default=None, metavar="SECONDS",
                   help="drop a client that reads nothing of its answer for this long (default 30)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header is NAME (repeatable; '*': any). Loopback names "
                        "and the --host address are always answered; others are refused against DNS rebinding")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (e.g. http://localhost:3000); repeatable; off by default")
    p.add_argument("--model", help="model to load at start (default: the default model)")
    p.add_argument("--backend", choices=BACKEND_NAMES, help="inference backend (default: setting, else auto)")
    p.set_defaults(func=_cmd_serve)


def _size(text: str) -> int:
    """'8388608', '512K', '8M' as bytes (argparse reports a ValueError as a usage error)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    text = text.strip().lower().removesuffix("b")
    scale = units.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in units else text
    if not digits.isdigit() or len(digits) > 12:
        raise ValueError(text)
    return int(digits) * scale


_size.__name__ = "size"  # argparse's message: "invalid size value: 'x'"


def _keys(args):
    from ..server.keys import ask_passphrase, open_keys

    key_file = Path(args.key_file).expanduser() if args.key_file else None
    interactive = sys.stdin is not None and sys.stdin.isatty()
    return open_keys(key_file=key_file, use_key_file=args.key_file is not None,
                     passphrase=ask_passphrase if interactive else None)


def _cmd_serve(args):
    from ..server.app import DEFAULT_MAX_QUEUE, DEFAULT_PORT, DEFAULT_WRITE_TIMEOUT, ServerOptions
    from ..server.body import DEFAULT_MAX_BODY
    from ..server.hosts import is_loopback

    if not is_loopback(args.host) and not args.allow_remote:
        raise InvalidRequest(f"--host {args.host} would let other machines reach Wren; add --allow-remote if "
                             "that is what you want (every request still needs the key)")
    args.cors_origin = [origin.strip().rstrip("/") for origin in args.cors_origin]  # as browsers send it
    for origin in args.cors_origin:  # a browser page's origin: scheme://host[:port], nothing more
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
                or parts.query or parts.fragment or parts.username:
            raise InvalidRequest(f"--cors-origin {origin!r} is not a page's origin, like http://localhost:3000 "
                                 "(a scheme and a host, with a port if not the usual one, and no path)")
    port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise InvalidRequest(f"--port must be between 0 and 65535, got {port}")
    options = ServerOptions(max_queue=DEFAULT_MAX_QUEUE if args.max_queue is None else args.max_queue,
                            cors_origins=tuple(args.cors_origin),
                            max_body=DEFAULT_MAX_BODY if args.max_body is None else args.max_body,
                            write_timeout=DEFAULT_WRITE_TIMEOUT if args.write_timeout is None else args.write_timeout,
                            allow_hosts=tuple(args.allow_host))
    keys = _keys(args)
    if args.show_key and not args.new_key:
        key = keys.get()
        if not key:
            print(f"wren: there is no server key yet in {keys.where}; `wren serve` or `wren serve --new-key` "
                  "makes one", file=sys.stderr)
            return 1
        print(key)
        return 0
    key, made = keys.create(replace=args.new_key)
    if made:
        print(f"wren serve: a new API key is in {keys.where}; `wren serve --show-key` prints it", file=sys.stderr)
    if args.show_key:
        print(key)
    if args.new_key and args.show_key:
        return 0
    if not is_loopback(args.host):
        from ..network.guard import check

        check(args.host, port, listen=True)  # the offline lock refuses, in its words, before the model loads
        print(f"wren serve: WARNING: listening on {args.host}, not only this computer: anyone who can reach "
              f"port {port} and has the key can use Wren. Traffic is plain HTTP; put TLS in front of it.",
              file=sys.stderr)
    return _serve(args, key, port, options)


async def _serve(args, key: str, port: int, options) -> int:
    from ..api import Engine
    from ..server.app import WrenServer, check_port

    check_port(args.host, port)  # a port in use is said before the model loads
    engine = Engine.open()
    try:
        status = await engine.models.load(args.model, backend=args.backend)
        server = WrenServer(engine, key, host=args.host, port=port, options=options)
        await server.start()
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"wren serve: {status.name} ({status.backend}) at http://{host}:{server.port}  "
              "(OpenAI base URL: …/v1; Ctrl+C stops)", file=sys.stderr, flush=True)
        await server.wait()
        if server.interrupted:  # the answers were stopped and stored; say so, as other commands do
            print("wren serve: stopped (Ctrl+C); answers still streaming were stopped and kept", file=sys.stderr)
            return 130
        return 0
    finally:
        await engine.close()
