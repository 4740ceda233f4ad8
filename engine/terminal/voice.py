"""`wren transcribe FILE [--json]` and `wren say TEXT [--out FILE.wav]`: speech to text and
text to speech on this machine (engine/voice). `wren ask --audio FILE` (main.py) asks what
the file says; `wren chat --voice` talks (VoiceChat: listen → answer → speak → listen);
`wren models pull ID` fetches the recognizers and voices Wren offers. The audio is read,
never kept."""

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
    p.add_argument("--model", metavar="ID", help="an installed speech recognizer (wren models pull whisper-base); "
                                                 "default: the starter whisper-tiny.en")
    p.set_defaults(func=_transcribe)

    p = subparsers.add_parser("say", help="speak text aloud, or write it as speech to a WAV file (offline)")
    p.add_argument("text", nargs="*", metavar="TEXT", help="the words (standard input when none are given); "
                                                           "Markdown symbols and code are not read out")
    p.add_argument("--out", metavar="FILE.wav", help="write the speech to this WAV file instead of playing it")
    p.add_argument("--speed", type=float, default=1.0, help="pace: 0.25 to 4 (default 1)")
    p.add_argument("--voice", metavar="ID", help="an installed voice (wren models pull de_DE-thorsten-medium); "
                                                 "default: the starter en_US-joe-medium")
    p.set_defaults(func=_say)


def transcript_of(path: str, *, language: str | None = None, echo: bool = False, model: str | None = None):
    """The Transcript of `path`; with `echo`, each segment on standard error as it is heard."""
    from ..voice.catalog import VoiceModels
    from ..voice.stt import Transcriber

    def heard(segment) -> None:
        print(shown(f"[{segment.start:7.1f}s] {segment.text}"), file=sys.stderr, flush=True)

    folder = VoiceModels().stt_dir(model) if model else None
    return Transcriber(folder).transcribe(path, language=language, on_segment=heard if echo else None)


def _transcribe(args: argparse.Namespace) -> int:
    long_file = sys.stderr.isatty() and not args.json
    transcript = transcript_of(args.file, language=args.language, echo=long_file, model=args.model)
    if args.json:
        print(json.dumps(transcript.to_dict(), ensure_ascii=False))
    elif transcript.heard:
        print(shown(transcript.text))
    if not transcript.heard:
        print(f"wren transcribe: no speech was heard in {args.file} ({transcript.duration:.1f} s of audio)",
              file=sys.stderr)
    return 0


def _say(args: argparse.Namespace) -> int:
    from ..voice.catalog import VoiceModels
    from ..voice.speech import Voice

    text = " ".join(args.text) if args.text else ("" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read())
    if not text.strip():
        raise InvalidRequest("`wren say` needs text: as words after it, or on standard input")
    voice = Voice(*VoiceModels().voice_files(args.voice)) if args.voice else Voice()
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


# -- wren models pull ID (a recognizer or a voice) --------------------------------------------

def is_voice_model(spec: str) -> bool:
    from ..voice.catalog import VoiceModels

    return any(m.id == spec for m in VoiceModels().all())


def pull_voice_model(model_id: str, bar) -> int:
    """Download a recognizer or voice with `bar(done, total)` drawn; Ctrl+C stops, the next pull resumes."""
    from ..voice.catalog import VoiceModels

    models = VoiceModels()
    entry = models.find(model_id)
    print(f"Pulling {entry.name} ({entry.id}) from {entry.repo}, about {entry.size_bytes / 1e6:,.0f} MB, "
          f"licence {entry.license}", file=sys.stderr)
    try:
        models.pull(model_id, progress=bar)
    except KeyboardInterrupt:
        bar.finish()
        print("wren: the download was stopped; pulling the same model again resumes it", file=sys.stderr)
        return 130
    finally:
        bar.finish()
    use = "wren transcribe --model" if entry.kind == "speech-to-text" else "wren say --voice"
    print(f"Installed {entry.id}; use it with `{use} {entry.id}` or choose it in the window's Voice menu")
    return 0


# -- wren chat --voice ------------------------------------------------------------------------

class VoiceChat:
    """`wren chat --voice`: each question is heard from the microphone (shown as typed), each
    answer spoken; Ctrl+C stops. Made before the model loads, so a computer without a
    microphone is told so at once."""

    def __init__(self) -> None:
        from ..voice.microphone import Speaker, open_microphone
        from ..voice.service import VoiceService

        self.microphone = open_microphone()
        self.speaker = Speaker()
        self.service = VoiceService()

    def listen(self, prompt: str = "") -> str:
        """One question, as the chat's line reader (EOFError when the input has ended)."""
        while True:
            print("(listening… speak; Ctrl+C stops)", file=sys.stderr, flush=True)
            listener = self.service.listener()
            for block in self.microphone.blocks():
                listener.feed(block)
                if listener.ended:
                    break
            text = listener.transcript().text if listener.heard_speech else ""
            if text:
                print(shown(f"{prompt or '> '}{text}"), flush=True)
                return text

    def speak(self, text: str) -> None:
        voice = self.service.voice()
        samples = voice.synthesize(text)
        if samples.size:
            self.speaker.play(samples, voice.sample_rate)
            print(f"(spoke {samples.size / voice.sample_rate:.1f} s)", file=sys.stderr, flush=True)

    async def last_answer(self, engine, conversation_id: int | None) -> str:
        if conversation_id is None:
            return ""
        messages = await engine.conversations.messages(conversation_id)
        answer = messages[-1] if messages else None
        return answer.content if answer is not None and getattr(answer.role, "value", None) == "assistant" else ""

    def close(self) -> None:
        self.microphone.close()
