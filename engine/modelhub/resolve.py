"""Which files a `wren pull` spec means on the Hugging Face hub: `resolve` turns `REPO[:FILE]`
into a PullPlan (one GGUF, chosen by its quantization, or a safetensors folder); `hub_call`
turns huggingface_hub's many errors into one clear WrenError. pull.py fetches the plan."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, ModelFileError, ModelNotFound, WrenError
from ..network.guard import check_url
from ..network.purpose import Part, acting
from .hub import FOLDER_PATTERNS, hub_endpoint

DEFAULT_QUANT = "Q4_K_M"
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
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
    info = hub_call(repo, lambda api: api.model_info(repo, files_metadata=True), endpoint)
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


def resolve_files(repo: str, filenames: list[str] | tuple[str, ...]) -> list[PullPlan]:
    """A plan for each of `filenames` in `repo`, all from the same commit (a model made of a
    few files that are not a GGUF or a safetensors folder: a Whisper or Piper voice model)."""
    endpoint = hub_endpoint()
    info = hub_call(repo, lambda api: api.model_info(repo, files_metadata=True), endpoint)
    if not info.sha:
        raise ModelFileError(f"the hub at {endpoint} gave no commit for {repo}")
    siblings = {s.rfilename: s for s in info.siblings or []}
    missing = [f for f in filenames if f not in siblings]
    if missing:
        raise ModelNotFound(f"{repo} has no file {', '.join(missing)}")
    return [_file_plan(repo, info.sha, siblings[f], endpoint) for f in filenames]


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

        meta = hub_call(repo, lambda api: get_hf_file_metadata(url, endpoint=endpoint), endpoint)
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


# -- hub errors -----------------------------------------------------------------------------

def hub_call(repo: str, call: Callable[[Any], Any], endpoint: str) -> Any:
    """Run a huggingface_hub call, turning its many error types into one clear WrenError."""
    with acting(Part.MODEL_DOWNLOAD, f"model pull of {repo}"):
        check_url(endpoint)  # the offline lock says so here, before the client retries a refused connection
        return _hub_call(repo, call, endpoint)


def _hub_call(repo: str, call: Callable[[Any], Any], endpoint: str) -> Any:
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
        raise WrenError(f"the Hugging Face hub refused a request for {repo}: {first_line(exc)}") from exc
    except (OSError, ValueError) as exc:
        raise WrenError(f"cannot reach the Hugging Face hub at {endpoint} ({first_line(exc)})") from exc
    except Exception as exc:  # httpx errors are not OSErrors
        raise WrenError(f"cannot reach the Hugging Face hub at {endpoint} "
                        f"({exc.__class__.__name__}: {first_line(exc)})") from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__
