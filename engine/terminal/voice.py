"""`wren transcribe FILE [--json]` and `wren say TEXT [--out FILE.wav]`: speech to text and
text to speech on this machine (engine/voice). `wren ask --audio FILE` (main.py) asks what
the file says. The audio is read, never kept."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import InvalidRequest
from .output import shown


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("transcribe", help="print the speech in an audio file as text (offline)",
                              description="Recognise the speech in FILE (WAV, FLAC, MP3, Ogg, M4A, ...; any "
                                          "sample rate, mono or stereo) with the Whisper model on this machine.")
    p.add_argument("file", help="the audio file")
    p.add_argument("--json", action="store_true", help="one JSON object: text, language, duration and "
                                                       "segments with start and end times")
    p.add_argument("--language", metavar="CODE", help="the language spoken (e.g. fr), for a multilingual model; "
                                                      "default: detected")
    p.set_defaults(func=_transcribe)

    p = subparsers.add_parser("say", help="speak text aloud, or write it as speech to a WAV file (offline)")
    p.add_argument("text", nargs="*", metavar="TEXT", help="the words (standard input when none are given); "
                                                           "Markdown symbols and code are not read out")
    p.add_argument("--out", metavar="FILE.wav", help="write the speech to this WAV file instead of playing it")
    p.add_argument("--speed", type=float, default=1.0, help="pace: 0.25 to 4 (default 1)")
    p.set_defaults(func=_say)


def transcript_of(path: str, *, language: str | None = None, echo: bool = False):
    """The Transcript of `path`; with `echo`, each segment on standard error as it is heard."""
    from ..voice.stt import Transcriber

    def heard(segment) -> None:
        print(shown(f"[{segment.start:7.1f}s] {segment.text}"), file=sys.stderr, flush=True)

    return Transcriber().transcribe(path, language=language, on_segment=heard if echo else None)


def _transcribe(args: argparse.Namespace) -> int:
    long_file = sys.stderr.isatty() and not args.json
    transcript = transcript_of(args.file, language=args.language, echo=long_file)
    if args.json:
        print(json.dumps(transcript.to_dict(), ensure_ascii=False))
    elif transcript.heard:
        print(shown(transcript.text))
    if not transcript.heard:
        print(f"wren transcribe: no speech was heard in {args.file} ({transcript.duration:.1f} s of audio)",
              file=sys.stderr)
    return 0


def _say(args: argparse.Namespace) -> int:
    from ..voice.speech import Voice

    text = " ".join(args.text) if args.text else ("" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read())
    if not text.strip():
        raise InvalidRequest("`wren say` needs text: as words after it, or on standard input")
    voice = Voice()
    samples = voice.synthesize(text, speed=args.speed)
    if samples.size == 0:
        raise InvalidRequest("there is nothing to say in that text (only symbols or code)")
    if args.out:
        from ..voice.audio import write_wav

        path = write_wav(args.out, samples, voice.sample_rate)
        print(f"wrote {samples.size / voice.sample_rate:.1f} s of speech to {path}", file=sys.stderr)
        return 0
    from ..voice.playback import play

    play(samples, voice.sample_rate)
    return 0
