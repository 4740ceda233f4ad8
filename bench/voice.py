"""Voice latency on this machine (JSON): from the end of a 5-second utterance to its
transcript (the recognizer loaded, as it is while the window listens), and from an answer's
first sentence being complete to its first audio sample (phonemes + the voice's model).

    python bench/voice.py [--runs 5] [--threads 2]

The utterance is spoken by eSpeak NG (espeak-ng must be installed), so the recognizer does not
hear Wren's own voice."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpuinfo import cpu

UTTERANCE = ("Could you please remind me tomorrow morning to call the dentist about my appointment "
             "and also buy some bread on the way home")
ANSWER = ("Paris is the capital of France. It lies on the Seine, in the north of the country, "
          "and is known for its museums.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from wren.engine.voice.audio import load_audio
    from wren.engine.voice.speakable import SentenceStream
    from wren.engine.voice.speech import Voice
    from wren.engine.voice.stt import Transcriber

    if shutil.which("espeak-ng") is None:
        sys.exit("bench/voice.py needs espeak-ng (apt install espeak-ng)")
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "utterance.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "210", "-w", str(wav), UTTERANCE], check=True)
        samples = load_audio(wav)
    started = time.perf_counter()
    transcriber = Transcriber(threads=args.threads)
    transcriber.load()
    stt_load = time.perf_counter() - started
    started = time.perf_counter()
    voice = Voice(threads=args.threads)
    voice.load()
    tts_load = time.perf_counter() - started

    to_transcript, heard = [], ""
    for _ in range(args.runs):
        started = time.perf_counter()
        heard = transcriber.transcribe(samples).text
        to_transcript.append(time.perf_counter() - started)
    to_audio = []
    for _ in range(args.runs):
        stream = SentenceStream()
        first = []
        for word in ANSWER.split(" "):  # the answer streams in word by word
            first = stream.feed(word + " ")
            if first:
                break
        started = time.perf_counter()  # the first sentence is complete now
        audio = voice.sentence(first[0])
        to_audio.append(time.perf_counter() - started)
        assert audio.size > 0
    print(json.dumps({
        "bench": "voice", **cpu(), "threads": args.threads, "runs": args.runs,
        "utterance_seconds": round(samples.size / 16_000, 2), "heard": heard,
        "stt_load_s": round(stt_load, 3), "tts_load_s": round(tts_load, 3),
        "end_of_speech_to_transcript_s_median": round(statistics.median(to_transcript), 3),
        "end_of_speech_to_transcript_s": [round(x, 3) for x in to_transcript],
        "first_sentence_to_first_audio_s_median": round(statistics.median(to_audio), 3),
        "first_sentence_to_first_audio_s": [round(x, 3) for x in to_audio],
    }))


if __name__ == "__main__":
    main()
