"""Fetch a model from the Hugging Face hub into the registry: `resolve` a spec, then `pull` it.

A GGUF is checked before it is fetched: enough free disk, and a header Wren can run (the
first few MB are read with a Range request and checked on a sparse file of the full size).
The file then downloads into `<models>/.downloads/<repo>--<file>/`, which the registry never
lists; an interrupted or cancelled download is resumed from where it stopped by the next
pull of the same file (a Range request from the partial file's size). The finished file is
checked against the hub's sha256 before it is moved into its model folder.

huggingface_hub's own `hf_hub_download` is not used for the file: it writes to a uniquely
named temporary file and deletes it when interrupted, so it resumes only within one call.
Its `http_get` is: it sends the Range, retries dropped connections from the bytes received,
and uses the library's HTTP session, token and endpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import (
    Cancelled,
    InvalidRequest,
    ModelFileError,
    UnsupportedArchitecture,
    UnsupportedQuantization,
    WrenError,
)
from ..network.guard import check_url
from ..network.purpose import Part, acting
from ..paths import private_dir
from .gguf_header import HEADER_PROBE_BYTES, gguf_header_length
from .hub import hub_endpoint
from .resolve import DEFAULT_QUANT, PullPlan, first_line, hub_call, quant_label, resolve, resolve_files
from .sizing import human_size

# the plan's names, read here by the terminal and the models service (pull.resolve, pull.PullPlan)
__all__ = ["DEFAULT_QUANT", "PullPlan", "downloads_folder", "fetch_file", "gguf_header_length", "pull", "quant_label",
           "resolve", "resolve_files"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

DOWNLOADS_DIR = ".downloads"
# huggingface_hub hands its progress bar (our progress and cancel check) one chunk at a time,
# 10 MB by default: smaller chunks keep the progress smooth and Ctrl+C quick on slow links
CHUNK_BYTES = 1 << 20
DISK_MARGIN = 0.10  # free space kept beyond the file itself
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# -- pull --------------------------------------------------------------------------------------

def pull(registry: Any, plan: PullPlan, *, name: str | None = None, progress: Progress | None = None,
         cancel: threading.Event | None = None) -> Any:
    """Fetch `plan` into `registry` (a ModelRegistry) and return the installed ModelInfo.
    `progress(done_bytes, total_bytes)` follows the download; setting `cancel` stops it with
    Cancelled, keeping the partial file for the next pull of the same file."""
    name = name if name is not None else plan.default_name
    _check_name(registry, name)
    with acting(Part.MODEL_DOWNLOAD, f"model pull of {plan.repo}"):
        check_url(hub_endpoint())  # locked: said before anything is fetched or made
        return _pull(registry, plan, name, progress, cancel)


def _pull(registry: Any, plan: PullPlan, name: str, progress: Progress | None,
          cancel: threading.Event | None) -> Any:
    if plan.kind == "folder":
        return _pull_folder(registry, plan, name, progress, cancel)
    root = Path(registry.root)
    workdir = root / DOWNLOADS_DIR / _download_key(plan)
    installed = False
    try:
        with _claimed(plan, workdir):
            final = _download(plan, workdir, progress, cancel)
            info = registry.import_gguf(final, name, move=True)
            installed = True
    finally:
        if installed or not workdir.exists():  # done, or refused: nothing left to resume
            shutil.rmtree(workdir, ignore_errors=True)
            _lock_path(workdir).unlink(missing_ok=True)
    return info


def _lock_path(workdir: Path) -> Path:
    return workdir.parent / f"{workdir.name}.lock"


@contextmanager
def _claimed(plan: PullPlan, workdir: Path) -> Iterator[None]:
    """`workdir` made and held by this process for the download (another Wren process
    downloading the same file is refused, not raced)."""
    private_dir(workdir)  # and .downloads above it
    from filelock import FileLock, Timeout

    lock = FileLock(str(_lock_path(workdir)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise InvalidRequest(f"{plan.repo}:{plan.filename} is already being downloaded by another Wren process") from None
    try:
        yield
    finally:
        lock.release()


def fetch_file(plan: PullPlan, workdir: Path, progress: Progress | None = None,
               cancel: threading.Event | None = None) -> Path:
    """Download one planned file (any kind: the voice models' files too) into `workdir`, with
    the same resume, size and sha256 checks as a GGUF, and return its path there. The caller
    moves it into place and removes `workdir`; one process at a time may use a workdir."""
    with _claimed(plan, workdir):
        return _download(plan, workdir, progress, cancel)


def download_key(plan: PullPlan) -> str:
    """The folder name under .downloads where `plan`'s partial file waits to be resumed."""
    return _download_key(plan)


def downloads_folder(registry: Any) -> Path:
    """Where partial downloads wait to be resumed (hidden from the registry's listing)."""
    return Path(registry.root) / DOWNLOADS_DIR


def _check_name(registry: Any, name: str) -> None:
    if not _NAME_RE.match(name):
        raise InvalidRequest(f"{name!r} is not a usable model name: use letters, digits, '.', '_' and '-' (at most 128)")
    if (Path(registry.root) / name).exists():
        raise InvalidRequest(f"a model named {name!r} is already installed; pick another name")


def check_disk_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise InvalidRequest(
            f"not enough disk space in {folder}: the download needs {human_size(needed)} free "
            f"(the file plus {DISK_MARGIN:.0%}) and {human_size(free)} are free"
        )


def _download_key(plan: PullPlan) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{plan.repo.replace('/', '--')}--{plan.filename}")


def _download(plan: PullPlan, workdir: Path, progress: Progress | None,
              cancel: threading.Event | None) -> Path:
    assert plan.filename is not None
    final = workdir / Path(plan.filename).name
    part = workdir / (final.name + ".part")
    record = workdir / "download.json"
    wanted = {"repo": plan.repo, "filename": plan.filename, "size": plan.size,
              "sha256": plan.sha256, "revision": plan.revision}
    previous = _read_json(record)
    same_bytes = previous == wanted or (
        isinstance(previous, dict) and plan.sha256 is not None
        and previous.get("sha256") == plan.sha256 and previous.get("size") == plan.size
    )
    if not same_bytes:  # what is there belongs to another version of the file: start over
        part.unlink(missing_ok=True)
        final.unlink(missing_ok=True)
    record.write_text(json.dumps(wanted), encoding="utf-8")
    if final.is_file() and final.stat().st_size == plan.size:
        _verify(plan, final)  # finished earlier, the import did not happen
        return final
    have = part.stat().st_size if part.is_file() else 0
    if have > plan.size:
        part.unlink()
        have = 0
    check_disk_space(workdir, plan.size - have + int(plan.size * DISK_MARGIN))
    _stop_if(cancel)
    headers = _headers()
    if final.suffix.lower() == ".gguf":  # other files (a voice model's) have no header to check first
        try:
            _check_header(plan, part, workdir, headers, cancel)
        except (UnsupportedArchitecture, UnsupportedQuantization, ModelFileError):
            shutil.rmtree(workdir, ignore_errors=True)  # Wren cannot run it: nothing worth resuming
            raise
    _fetch_rest(plan, part, headers, progress, cancel)
    _verify(plan, part)
    os.replace(part, final)
    return final


def _stop_if(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("the download was cancelled; pulling the same model again resumes it")


def _headers() -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"  # byte ranges of the file itself, never of a compressed body
    return headers


def _http_get(plan: PullPlan, out: Any, *, resume_size: int, expected_size: int, headers: dict[str, str],
              meter: Any) -> None:
    from huggingface_hub import constants
    from huggingface_hub.file_download import http_get

    # read at each call, and only by downloads: lowering it costs no throughput
    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, CHUNK_BYTES)
    try:
        http_get(plan.url, out, resume_size=resume_size, headers=headers, expected_size=expected_size,
                 displayed_filename=Path(plan.filename or "").name, tqdm_class=meter)
    except (WrenError, _RangeIgnored):
        raise
    except Exception as exc:  # network and hub errors come in many types; the user needs one message
        out.flush()
        got = out.tell()
        raise WrenError(
            f"downloading {plan.repo}:{plan.filename} stopped after {human_size(got)} of {human_size(plan.size)} "
            f"({exc.__class__.__name__}: {first_line(exc)}); pull it again to resume"
        ) from exc


def _check_header(plan: PullPlan, part: Path, workdir: Path, headers: dict[str, str],
                  cancel: threading.Event | None) -> None:
    """Fetch the file's start (into the partial file: these bytes are the download's first)
    until it holds the whole GGUF header, then check a sparse full-size copy of it."""
    # the bytes asked for are the download's first, so none is fetched twice
    want = min(HEADER_PROBE_BYTES, plan.size)
    while True:
        have = part.stat().st_size if part.is_file() else 0
        if have < want:
            with open(part, "ab") as out:
                range_headers = {**headers, "Range": f"bytes={have}-{want - 1}"}
                try:
                    _http_get(plan, out, resume_size=0, expected_size=want - have, headers=range_headers,
                              meter=_Meter.factory(None, cancel, limit=want - have))
                except _RangeIgnored:
                    out.truncate(have)  # what came was the file's start, not the bytes asked for
                    raise WrenError(f"the hub at {hub_endpoint()} ignored a byte-range request for "
                                    f"{plan.repo}:{plan.filename}; Wren needs ranges to check a file "
                                    "before downloading it and to resume downloads") from None
        with open(part, "rb") as fh:
            prefix = fh.read(want)
        end = gguf_header_length(prefix, plan.size)
        if end is not None or want >= plan.size:
            break
        want = min(want * 2, plan.size)
    from .gguf_import import check_prefix

    check_prefix(prefix, plan.size, workdir, f"{plan.repo}:{plan.filename}")


def _fetch_rest(plan: PullPlan, part: Path, headers: dict[str, str], progress: Progress | None,
                cancel: threading.Event | None) -> None:
    with open(part, "ab") as out:
        have = out.tell()
        if progress is not None:
            progress(have, plan.size)
        if have < plan.size:
            _http_get(plan, out, resume_size=have, expected_size=plan.size, headers=headers,
                      meter=_Meter.factory(progress, cancel, plan.size))


def _verify(plan: PullPlan, path: Path) -> None:
    size = path.stat().st_size
    if size != plan.size:
        path.unlink(missing_ok=True)
        raise ModelFileError(f"{plan.repo}:{plan.filename} arrived with {size} bytes instead of {plan.size}; "
                             "the download is corrupt; run the pull again")
    if plan.sha256 is None:
        log.warning("the hub gave no sha256 for %s:%s; only its size was checked", plan.repo, plan.filename)
        return
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            digest.update(chunk)
    if digest.hexdigest() != plan.sha256:
        path.unlink(missing_ok=True)
        raise ModelFileError(
            f"checksum mismatch for {plan.repo}:{plan.filename}: the hub says sha256 {plan.sha256}, "
            f"the file has {digest.hexdigest()}; the download is corrupt; run the pull again"
        )


class _RangeIgnored(Exception):
    pass


class _Meter:
    """What huggingface_hub's downloader drives as its progress bar: it forwards bytes to
    `progress` and stops the download when `cancel` is set."""

    def __init__(self, progress: Progress | None, cancel: threading.Event | None, size: int | None,
                 limit: int | None, bar: dict[str, Any]) -> None:
        self.progress, self.cancel, self.limit = progress, cancel, limit
        self.total = size or bar.get("total")
        self.n = int(bar.get("initial") or 0)

    @classmethod
    def factory(cls, progress: Progress | None, cancel: threading.Event | None, size: int | None = None,
                *, limit: int | None = None) -> Callable[..., _Meter]:
        """`limit`: the bytes a range request asked for; more means the range was ignored."""
        return lambda **bar: cls(progress, cancel, size, limit, bar)

    def update(self, n: float | None = 1) -> None:
        self.n += int(n or 0)
        if self.limit is not None and self.n > self.limit:
            raise _RangeIgnored
        if self.progress is not None and self.total:
            self.progress(self.n, int(self.total))
        _stop_if(self.cancel)

    def close(self) -> None:
        pass

    def __enter__(self) -> _Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


# -- a safetensors folder ----------------------------------------------------------------------

def _pull_folder(registry: Any, plan: PullPlan, name: str, progress: Progress | None,
                 cancel: threading.Event | None) -> Any:
    check_disk_space(Path(registry.root), plan.size + int(plan.size * DISK_MARGIN))
    _stop_if(cancel)
    _check_folder_config(plan, Path(registry.root))

    def report(done: int, total: int) -> None:
        if progress is not None:  # the hub's total grows as each file starts; the plan knows it all
            progress(min(done, max(total, plan.size)), max(total, plan.size))
        _stop_if(cancel)

    return registry.download(plan.repo, name=name, revision=plan.revision, progress=report)


def _check_folder_config(plan: PullPlan, root: Path) -> None:
    """Read the repo's config.json first, so an architecture Wren cannot run is refused
    before gigabytes of weights are fetched."""
    import tempfile

    from huggingface_hub import hf_hub_download

    from ..inference import families

    with tempfile.TemporaryDirectory(prefix=".config-", dir=root) as tmp:
        path = hub_call(plan.repo, lambda _api: hf_hub_download(
            plan.repo, "config.json", revision=plan.revision, local_dir=tmp, endpoint=hub_endpoint()),
            hub_endpoint())
        try:
            config = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelFileError(f"the config.json of {plan.repo} cannot be read: {exc}") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if families.find_model_type(model_type) is None:
        raise UnsupportedArchitecture(
            f"{plan.repo} holds a {model_type!r} model; Wren runs {', '.join(families.model_types())}"
        )


# -- small helpers ---------------------------------------------------------------------------

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
