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
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import (
    Cancelled,
    InvalidRequest,
    ModelFileError,
    ModelNotFound,
    UnsupportedArchitecture,
    UnsupportedQuantization,
    WrenError,
)
from .hub import FOLDER_PATTERNS, hub_endpoint

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

DEFAULT_QUANT = "Q4_K_M"
DOWNLOADS_DIR = ".downloads"
# the first Range request for a GGUF header, doubled until the header fits (a 150k-token
# vocabulary takes about 6 MB); the bytes are the download's first, so none is fetched twice
HEADER_PROBE_BYTES = 4 << 20
# huggingface_hub hands its progress bar (our progress and cancel check) one chunk at a time,
# 10 MB by default: smaller chunks keep the progress smooth and Ctrl+C quick on slow links
CHUNK_BYTES = 1 << 20
DISK_MARGIN = 0.10  # free space kept beyond the file itself
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# a quantization label as GGUF file names carry it: Q4_K_M, IQ4_XS, Q8_0, BF16, F16...
_QUANT_RE = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Za-z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class PullPlan:
    """What `pull` will fetch. `filename` None: a safetensors repo, fetched as a folder."""

    repo: str
    filename: str | None
    revision: str  # the commit the files come from
    size: int  # bytes to download
    sha256: str | None  # of the GGUF, from the hub's LFS record
    url: str  # the GGUF's download address, or the repo's page for a folder
    quantization: str | None = None  # the label in the file name, e.g. "Q4_K_M"
    files: tuple[str, ...] = field(default=())  # a folder's files

    @property
    def kind(self) -> str:
        return "gguf" if self.filename else "folder"

    @property
    def default_name(self) -> str:
        stem = Path(self.filename).name[: -len(".gguf")] if self.filename else self.repo.split("/")[1]
        return re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._")[:128] or "model"


# -- resolve ---------------------------------------------------------------------------------

def resolve(spec: str, quant: str | None = DEFAULT_QUANT) -> PullPlan:
    """Turn `REPO[:FILE]` into a plan. Without FILE, the repo's GGUF whose name carries
    `quant` is chosen; a repo without GGUF files is a safetensors folder."""
    repo, _, name = spec.strip().partition(":")
    repo, filename = repo.strip(), name.strip() or None
    if not _REPO_RE.match(repo):
        raise InvalidRequest(f"{spec!r} is not a Hugging Face model: write OWNER/NAME or OWNER/NAME:FILE.gguf")
    endpoint = hub_endpoint()
    info = _hub_call(repo, lambda api: api.model_info(repo, files_metadata=True), endpoint)
    if not info.sha:
        raise ModelFileError(f"the hub at {endpoint} gave no commit for {repo}")
    siblings = {s.rfilename: s for s in info.siblings or []}
    ggufs = sorted(f for f in siblings if f.lower().endswith(".gguf"))
    if filename is not None:
        if filename not in siblings:
            listing = ", ".join(ggufs) or "none"
            raise InvalidRequest(f"{repo} has no file {filename!r} (its GGUF files: {listing})")
        if not filename.lower().endswith(".gguf"):
            raise InvalidRequest(f"{filename!r} is not a GGUF file; Wren pulls .gguf files or whole safetensors repos")
    elif ggufs:
        filename = _choose(repo, [f for f in ggufs if "mmproj" not in f.lower()] or ggufs, quant)
    else:
        return _folder_plan(repo, info.sha, siblings, endpoint)
    _refuse_split(repo, filename, ggufs)
    return _file_plan(repo, info.sha, siblings[filename], endpoint)


def quant_label(filename: str) -> str | None:
    """The quantization a GGUF's name carries (the last label in it), upper-cased."""
    labels = _QUANT_RE.findall(Path(filename).name)
    return labels[-1].upper() if labels else None


def _choose(repo: str, ggufs: list[str], quant: str | None) -> str:
    firsts = [f for f in ggufs if (split := _SPLIT_RE.search(f)) is None or split.group(1) == "00001"]
    if quant is None:
        if len(firsts) == 1:
            return firsts[0]
        raise InvalidRequest(f"{repo} has several GGUF files ({', '.join(firsts)}); "
                             f"choose one with a quantization or as {repo}:FILE")
    wanted = quant.strip().upper()
    matches = [f for f in firsts if quant_label(f) == wanted]
    if not matches:  # names that spell the label in some other way
        matches = [f for f in firsts if wanted in Path(f).name.upper()]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise InvalidRequest(f"several GGUF files of {repo} match {wanted}: {', '.join(matches)}; "
                             f"name one as {repo}:FILE")
    labels = sorted({quant_label(f) or Path(f).name for f in firsts})
    raise InvalidRequest(f"{repo} has no {wanted} GGUF; its quantizations: {', '.join(labels)}")


def _refuse_split(repo: str, filename: str, ggufs: list[str]) -> None:
    match = _SPLIT_RE.search(filename)
    if match:
        raise InvalidRequest(
            f"{repo}:{filename} is part {int(match.group(1))} of a GGUF split into {int(match.group(2))} files; "
            "Wren imports single-file GGUFs (merge the parts with llama-gguf-split --merge and import the result)"
        )


def _file_plan(repo: str, commit: str, sibling: Any, endpoint: str) -> PullPlan:
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(repo, sibling.rfilename, revision=commit, endpoint=endpoint)
    lfs = getattr(sibling, "lfs", None)
    sha256 = lfs.sha256 if lfs is not None else None
    size = lfs.size if lfs is not None else sibling.size
    if size is None or sha256 is None:  # the listing lacked them: ask for the file's own record
        from huggingface_hub import get_hf_file_metadata

        meta = _hub_call(repo, lambda api: get_hf_file_metadata(url, endpoint=endpoint), endpoint)
        size = size if size is not None else meta.size
        if sha256 is None and meta.etag and _SHA256_RE.match(meta.etag):
            sha256 = meta.etag
    if size is None:
        raise ModelFileError(f"the hub did not say how large {repo}:{sibling.rfilename} is")
    return PullPlan(repo=repo, filename=sibling.rfilename, revision=commit, size=int(size), sha256=sha256,
                    url=url, quantization=quant_label(sibling.rfilename))


def _folder_plan(repo: str, commit: str, siblings: dict[str, Any], endpoint: str) -> PullPlan:
    from fnmatch import fnmatch

    files = tuple(f for f in sorted(siblings) if "/" not in f and any(fnmatch(f, p) for p in FOLDER_PATTERNS))
    if not any(f.endswith(".safetensors") for f in files) or "config.json" not in files:
        raise InvalidRequest(f"{repo} has neither GGUF files nor a safetensors model (config.json and "
                             "*.safetensors); Wren cannot use it")
    size = sum(int(siblings[f].size or 0) for f in files)
    return PullPlan(repo=repo, filename=None, revision=commit, size=size, sha256=None,
                    url=f"{endpoint}/{repo}", quantization=None, files=files)


# -- pull --------------------------------------------------------------------------------------

def pull(registry: Any, plan: PullPlan, *, name: str | None = None, progress: Progress | None = None,
         cancel: threading.Event | None = None) -> Any:
    """Fetch `plan` into `registry` (a ModelRegistry) and return the installed ModelInfo.
    `progress(done_bytes, total_bytes)` follows the download; setting `cancel` stops it with
    Cancelled, keeping the partial file for the next pull of the same file."""
    name = name if name is not None else plan.default_name
    _check_name(registry, name)
    if plan.kind == "folder":
        return _pull_folder(registry, plan, name, progress, cancel)
    root = Path(registry.root)
    workdir = root / DOWNLOADS_DIR / _download_key(plan)
    workdir.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock, Timeout

    lock = FileLock(str(workdir.parent / f"{workdir.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise InvalidRequest(f"{plan.repo}:{plan.filename} is already being downloaded by another Wren process") from None
    installed = False
    try:
        final = _download(plan, workdir, progress, cancel)
        info = registry.import_gguf(final, name, move=True)
        installed = True
    finally:
        lock.release()
        if installed or not workdir.exists():  # done, or refused: nothing left to resume
            shutil.rmtree(workdir, ignore_errors=True)
            Path(lock.lock_file).unlink(missing_ok=True)
    return info


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
            f"not enough disk space in {folder}: the download needs {_gb(needed)} GB free "
            f"(the file plus {DISK_MARGIN:.0%}) and {_gb(free)} GB are free"
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f}" if n < 10e9 else f"{n / 1e9:.1f}"


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
            f"downloading {plan.repo}:{plan.filename} stopped after {_mb(got)} of {_mb(plan.size)} MB "
            f"({exc.__class__.__name__}: {_first_line(exc)}); pull it again to resume"
        ) from exc


def _check_header(plan: PullPlan, part: Path, workdir: Path, headers: dict[str, str],
                  cancel: threading.Event | None) -> None:
    """Fetch the file's start (into the partial file: these bytes are the download's first)
    until it holds the whole GGUF header, then check a sparse full-size copy of it."""
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
    probe_dir = workdir / "probe"
    probe_dir.mkdir(exist_ok=True)
    probe = probe_dir / Path(plan.filename or "model.gguf").name
    try:
        with open(probe, "wb") as fh:
            fh.write(prefix)
        os.truncate(probe, plan.size)  # sparse: the tensor data is holes, taking no disk
        from .gguf_import import check_runnable

        try:
            check_runnable(probe)
        except (UnsupportedArchitecture, UnsupportedQuantization, ModelFileError) as exc:
            raise type(exc)(_name_the_remote(str(exc), probe, f"{plan.repo}:{plan.filename}")) from exc
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)


def _name_the_remote(message: str, probe: Path, label: str) -> str:
    """An error about the sparse probe file, reworded to name the file on the hub."""
    if str(probe) in message:
        return message.replace(str(probe), label)
    if probe.name in message:
        return message.replace(probe.name, label, 1)
    return f"{label}: {message}"


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
        path = _hub_call(plan.repo, lambda _api: hf_hub_download(
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


# -- hub errors -----------------------------------------------------------------------------

def _hub_call(repo: str, call: Callable[[Any], Any], endpoint: str) -> Any:
    """Run a huggingface_hub call, turning its many error types into one clear WrenError."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as exc:
        raise ModelFileError("downloading from the Hugging Face hub needs the huggingface_hub package") from exc
    try:
        return call(HfApi(endpoint=endpoint))
    except WrenError:
        raise
    except GatedRepoError:
        raise InvalidRequest(f"{repo} is gated: accept its terms on the hub's page, then log in with "
                             "`hf auth login` and pull again") from None
    except RepositoryNotFoundError:
        raise ModelNotFound(f"the Hugging Face hub has no model {repo} (or it is private)") from None
    except RevisionNotFoundError:
        raise ModelNotFound(f"{repo} has no such revision") from None
    except HfHubHTTPError as exc:
        raise WrenError(f"the Hugging Face hub refused a request for {repo}: {_first_line(exc)}") from exc
    except (OSError, ValueError) as exc:
        raise WrenError(f"cannot reach the Hugging Face hub at {endpoint} ({_first_line(exc)})") from exc
    except Exception as exc:  # httpx errors are not OSErrors
        raise WrenError(f"cannot reach the Hugging Face hub at {endpoint} "
                        f"({exc.__class__.__name__}: {_first_line(exc)})") from exc


# -- the GGUF header's length ------------------------------------------------------------------

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Short(Exception):
    pass


def gguf_header_length(prefix: bytes, file_size: int) -> int | None:
    """How many bytes a GGUF's metadata and tensor table take, from the file's first bytes;
    None if `prefix` stops inside them. Bytes that are not a sane GGUF header give
    len(prefix): the import's own check then says what is wrong with them."""
    corrupt = len(prefix)
    if len(prefix) < 24:
        return None if len(prefix) < file_size and b"GGUF".startswith(prefix[:4]) else corrupt
    if prefix[:4] != b"GGUF":
        return corrupt
    pos = 8

    def take(n: int) -> int:
        nonlocal pos
        if n < 0 or pos + n > file_size:
            raise ValueError("past the end of the file")
        if pos + n > len(prefix):
            raise _Short
        start, pos = pos, pos + n
        return start

    def u32() -> int:
        return struct.unpack_from("<I", prefix, take(4))[0]

    def u64() -> int:
        return struct.unpack_from("<Q", prefix, take(8))[0]

    def skip_value(vtype: int) -> None:
        if vtype in _SCALAR_SIZES:
            take(_SCALAR_SIZES[vtype])
        elif vtype == _STRING:
            take(u64())
        elif vtype == _ARRAY:
            item, count = u32(), u64()
            if item in _SCALAR_SIZES:
                take(count * _SCALAR_SIZES[item])
            else:
                for _ in range(count):
                    skip_value(item)
        else:
            raise ValueError(f"unknown metadata type {vtype}")

    try:
        n_tensors, n_kv = u64(), u64()
        for _ in range(n_kv):
            take(u64())  # the key
            skip_value(u32())
        for _ in range(n_tensors):
            take(u64())  # the name
            n_dims = u32()
            if n_dims > 4:
                raise ValueError("too many dimensions")
            take(8 * n_dims + 4 + 8)  # dims, type, offset
    except _Short:
        return None
    except ValueError:
        return corrupt
    return pos


# -- small helpers ---------------------------------------------------------------------------

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__
