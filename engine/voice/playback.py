"""Playing speech from the terminal (`wren say` without --out): the system's own player on
a temporary WAV file — afplay on macOS, winsound on Windows, PipeWire's, PulseAudio's or
ALSA's player on Linux. The window plays through Qt instead (desktop/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..errors import WrenError
from .audio import write_wav

LINUX_PLAYERS = (("pw-play", ()), ("paplay", ()), ("aplay", ("-q",)))


class NoAudioOutput(WrenError):
    """Nothing here can play sound."""


def player() -> list[str] | None:
    """The command that plays a WAV file here (its file name goes last); None on Windows
    (winsound) or where there is none."""
    if sys.platform == "darwin":
        return ["afplay"] if shutil.which("afplay") else None
    if sys.platform == "win32":
        return None
    for name, options in LINUX_PLAYERS:
        found = shutil.which(name)
        if found:
            return [found, *options]
    return None


def play(samples: np.ndarray, rate: int) -> None:
    """Play the samples and return when they have been played."""
    with tempfile.TemporaryDirectory(prefix="wren-say-") as folder:
        wav = write_wav(Path(folder) / "speech.wav", samples, rate)
        if sys.platform == "win32":
            import winsound

            winsound.PlaySound(str(wav), winsound.SND_FILENAME)
            return
        command = player()
        if command is None:
            raise NoAudioOutput("no audio player was found (pw-play, paplay or aplay on Linux; afplay on macOS); "
                                "write the speech to a file with --out FILE.wav instead")
        done = subprocess.run([*command, str(wav)], capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise NoAudioOutput(f"{Path(command[0]).name} could not play the speech"
                                f"{': ' + said[-1] if said else ''} (no sound device?); use --out FILE.wav")
