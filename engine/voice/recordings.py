"""Kept dictation audio, only when the user turns the "keep audio" setting on (off by
default: the transcript is the message and the sound is dropped). A recording is a WAV in
`<data>/voice-audio/<conversation id>/`, named by the time the question was sent; it goes
when its chat is purged (engine/privacy.py) or everything is erased. Temporary chats keep none."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .audio import RATE, write_wav

KEEP_AUDIO_SETTING = "voice.keep_audio"
FOLDER = "voice-audio"
TEMPORARY_IDS = 1 << 40  # engine.core's first temporary chat id: those chats leave nothing on disk


def recordings_dir(data: Path | None = None) -> Path:
    if data is None:
        from ..paths import data_dir

        data = data_dir()
    return Path(data) / FOLDER


def keep(conversation_id: int, samples: np.ndarray, *, rate: int = RATE, data: Path | None = None) -> Path | None:
    """Save one question's audio with its chat; None for a temporary chat or no sound."""
    if conversation_id >= TEMPORARY_IDS or np.asarray(samples).size == 0:
        return None
    from ..paths import private_dir

    folder = private_dir(recordings_dir(data) / str(int(conversation_id)))
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path, n = folder / f"{stamp}.wav", 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}-{n}.wav"
    return write_wav(path, samples, rate)


def recordings(conversation_id: int, *, data: Path | None = None) -> list[Path]:
    folder = recordings_dir(data) / str(int(conversation_id))
    return sorted(folder.glob("*.wav")) if folder.is_dir() else []


def forget(conversation_ids: Iterable[int], *, data: Path | None = None) -> int:
    """Delete the purged chats' recordings; how many folders went."""
    root, gone = recordings_dir(data), 0
    for cid in conversation_ids:
        folder = root / str(int(cid))
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            gone += 1
    return gone
