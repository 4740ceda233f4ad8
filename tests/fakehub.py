"""A small Hugging Face hub on 127.0.0.1 for download tests.

It answers the requests huggingface_hub (2.x) makes for `model_info` / `list_repo_files`
(GET /api/models/{repo}[/revision/{rev}], `?blobs=true` adds sizes and LFS sha256),
`list_repo_tree` (GET /api/models/{repo}/tree/{rev}), `get_hf_file_metadata` (HEAD on
/{repo}/resolve/{rev}/{file}: X-Repo-Commit, ETag, X-Linked-Etag / X-Linked-Size for LFS
files) and downloads (GET on the same path, honouring `Range: bytes=a-[b]` with a 206 and
Content-Range). Errors carry the X-Error-Code the client turns into its typed exceptions.

Faults, each for one file: `cut_after(repo, file, n)` closes the next download of that file
after n body bytes; `corrupt(repo, file)` serves bytes that differ from the advertised sha256.
`slow(repo, file)` paces a file's body so a test can interrupt it midway.
Every request is recorded (method, path, Range header, status, body bytes sent) so a test
can check what was fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass
class RepoFile:
    data: bytes
    lfs: bool
    sha256: str = ""
    blob_id: str = ""

    def __post_init__(self) -> None:
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.blob_id = hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


@dataclass
class Repo:
    commit: str
    files: dict[str, RepoFile] = field(default_factory=dict)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # without the query string, percent-decoded
    range: str | None
    status: int
    body_bytes: int  # bytes of file content sent (0 for API and HEAD answers)


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Recorded] = []
        self._cuts: dict[tuple[str, str], int] = {}
        self._corrupt: set[tuple[str, str]] = set()
        self._slow: dict[tuple[str, str], tuple[int, float]] = {}
        self.ignore_ranges = False  # True: answer every GET with the whole file, as some mirrors do
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fakehub", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- content -------------------------------------------------------------------------

    def add_file(self, repo: str, filename: str, data: bytes, *, lfs: bool = True) -> RepoFile:
        with self._lock:
            entry = self.repos.setdefault(repo, Repo(commit=hashlib.sha1(repo.encode()).hexdigest()))
            entry.files[filename] = RepoFile(data, lfs)
            return entry.files[filename]

    def commit(self, repo: str) -> str:
        return self.repos[repo].commit

    # -- faults --------------------------------------------------------------------------

    def cut_after(self, repo: str, filename: str, n_bytes: int) -> None:
        """The next GET of this file whose body is longer than `n_bytes` sends that many bytes,
        then drops the connection."""
        with self._lock:
            self._cuts[(repo, filename)] = n_bytes

    def slow(self, repo: str, filename: str, *, chunk: int = 16384, delay: float = 0.02) -> None:
        """Send this file in `chunk`-byte pieces with `delay` seconds between them."""
        with self._lock:
            self._slow[(repo, filename)] = (chunk, delay)

    def corrupt(self, repo: str, filename: str) -> None:
        """Serve this file with one byte changed, under the sha256 of the real content."""
        with self._lock:
            self._corrupt.add((repo, filename))

    # -- what was asked --------------------------------------------------------------------

    def downloads(self, filename: str) -> list[Recorded]:
        """The GETs of a file (not HEADs, not API calls), in order."""
        with self._lock:
            return [r for r in self.requests
                    if r.method == "GET" and "/resolve/" in r.path and r.path.endswith("/" + filename)]

    def bytes_served(self, filename: str) -> int:
        return sum(r.body_bytes for r in self.downloads(filename))

    def _record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def _take_cut(self, key: tuple[str, str], body_size: int) -> int | None:
        """The cut for a response of `body_size` bytes, once; a shorter body is sent whole."""
        with self._lock:
            cut = self._cuts.get(key)
            if cut is None or cut >= body_size:
                return None
            return self._cuts.pop(key)

    def _content(self, repo: str, filename: str, item: RepoFile) -> bytes:
        with self._lock:
            corrupt = (repo, filename) in self._corrupt
        if not corrupt:
            return item.data
        data = bytearray(item.data)
        data[len(data) // 2] ^= 0xFF
        return bytes(data)


class _HubHandler(BaseHTTPRequestHandler):
    """The fake hub's HTTP side; `_handler_for` binds it to one FakeHub."""

    hub: FakeHub
    protocol_version = "HTTP/1.0"  # one request per connection: a cut is a closed socket

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    # -- routing ---------------------------------------------------------------------

    def _route(self, head: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        self._status, self._sent = 0, 0
        try:
            if path.startswith("/api/models/"):
                self._api(path[len("/api/models/"):], query)
            elif "/resolve/" in path:
                self._resolve(path, head)
            else:
                self._error(404, "RepoNotFound", f"no route for {path}")
        finally:
            self.hub._record(Recorded(self.command, path, self.headers.get("Range"), self._status, self._sent))

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        return repo

    def _revision_ok(self, repo: Repo, revision: str) -> bool:
        if revision in ("main", repo.commit):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    # -- /api/models -------------------------------------------------------------------

    def _api(self, rest: str, query: dict[str, list[str]]) -> None:
        owner, _, rest = rest.partition("/")
        name, _, rest = rest.partition("/")
        repo = self._repo(f"{owner}/{name}")
        if repo is None:
            return
        revision = "main"
        if rest.startswith("revision/"):
            revision = rest[len("revision/"):]
            rest = ""
        if rest.startswith("tree/"):
            revision = rest[len("tree/"):].split("/", 1)[0]
            if self._revision_ok(repo, revision):
                self._json(200, [self._tree_entry(path, item) for path, item in sorted(repo.files.items())])
            return
        if rest:
            self._error(404, "RepoNotFound", f"no route for /api/models/{owner}/{name}/{rest}")
            return
        if not self._revision_ok(repo, revision):
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for path, item in sorted(repo.files.items()):
            sibling: dict[str, object] = {"rfilename": path}
            if blobs:
                sibling |= {"size": len(item.data), "blobId": item.blob_id}
                if item.lfs:
                    sibling["lfs"] = {"sha256": item.sha256, "size": len(item.data), "pointerSize": 134}
            siblings.append(sibling)
        self._json(200, {"id": f"{owner}/{name}", "modelId": f"{owner}/{name}", "sha": repo.commit,
                         "private": False, "siblings": siblings})

    @staticmethod
    def _tree_entry(path: str, item: RepoFile) -> dict[str, object]:
        entry: dict[str, object] = {"type": "file", "path": path, "size": len(item.data), "oid": item.blob_id}
        if item.lfs:
            entry["lfs"] = {"oid": item.sha256, "size": len(item.data), "pointerSize": 134}
        return entry

    # -- /{repo}/resolve/{revision}/{file} -----------------------------------------------

    def _resolve(self, path: str, head: bool) -> None:
        repo_id, _, rest = path.lstrip("/").partition("/resolve/")
        revision, _, filename = rest.partition("/")
        repo = self._repo(repo_id)
        if repo is None or not self._revision_ok(repo, revision):
            return
        item = repo.files.get(filename)
        if item is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist on {revision}",
                        {"X-Repo-Commit": repo.commit})
            return
        data = self.hub._content(repo_id, filename, item)
        size = len(data)
        start, end = 0, size - 1
        status = 200
        wanted = self.headers.get("Range")
        if wanted and not head and not self.hub.ignore_ranges:
            match = _RANGE.match(wanted.strip())
            if match is None or (not match.group(1) and not match.group(2)):
                self._error(416, None, f"bad Range {wanted!r}")
                return
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:  # a suffix: the last n bytes
                start = max(size - int(match.group(2)), 0)
            if start >= size or start > end:
                self._error(416, None, f"Range {wanted!r} is outside a file of {size} bytes",
                            {"Content-Range": f"bytes */{size}"})
                return
            status = 206
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{item.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Length": str(end - start + 1),
        }
        if item.lfs:
            headers |= {"X-Linked-Etag": f'"{item.sha256}"', "X-Linked-Size": str(size)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._begin(status, headers)
        if head:
            return
        body = data[start:end + 1]
        cut = self.hub._take_cut((repo_id, filename), len(body))
        if cut is not None:
            self._write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # the client sees the body end early
            return
        with self.hub._lock:
            pace = self.hub._slow.get((repo_id, filename))
        if pace is None:
            self._write(body)
            return
        step, delay = pace
        for at in range(0, len(body), step):
            if not self._write(body[at:at + step]):
                return
            time.sleep(delay)

    # -- plumbing ---------------------------------------------------------------------

    def _write(self, body: bytes) -> bool:
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return False  # the client stopped reading (a cancelled download)
        self._sent += len(body)
        return True

    def _begin(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _json(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self._begin(status, {"Content-Type": "application/json", "Content-Length": str(len(body))})
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str,
               extra: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
                   "X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._begin(status, headers)
        if self.command != "HEAD":
            self.wfile.write(body)


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_HubHandler,), {"hub": hub})


def use_fake_hub(hub: FakeHub, monkeypatch: Any, home: Path, *, chunk_size: int = 16 << 10) -> None:
    """Point huggingface_hub (already imported or not) at `hub`, with its own empty HF_HOME,
    no token, and download chunks of `chunk_size` so progress and cancelling are fine-grained."""
    import huggingface_hub.constants as constants

    home.mkdir(parents=True, exist_ok=True)
    for key, value in {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0",
                       "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    # read once at import: set them here too
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", chunk_size)
