"""`wren say`: speech the recognizer hears back as the same words (WER at most 0.25);
Markdown and code are not read out; an answer is cut into sentences while it streams; bad
requests say what was wrong."""

from __future__ import annotations

import os

import pytest

from tests.engine.voice.conftest import SENTENCES, read_wav, wer
from wren.engine.terminal.main import main
from wren.engine.voice.speakable import SentenceStream, sentences, speakable
from wren.engine.voice.speech import VoiceUnavailable

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_say_writes_speech_that_is_heard_back(tmp_path, transcriber, capsys):
    text = " ".join(SENTENCES[:3])
    out = tmp_path / "speech.wav"
    assert main(["say", text, "--out", str(out)]) == 0
    assert "of speech to" in capsys.readouterr().err
    samples, rate = read_wav(out)
    assert rate == 22_050 and samples.shape[1] == 1 and samples.shape[0] > rate * 3
    assert wer(text, transcriber.transcribe(out).text) <= 0.25


@pytest.mark.slow
def test_markdown_is_spoken_as_words(voice, transcriber, tmp_path):
    from wren.engine.voice.audio import write_wav

    answer = "## Result\n\nThe **answer** is `blue`, see [the docs](https://example.com/x).\n\n```python\nprint(42)\n```\n"
    heard = transcriber.transcribe(write_wav(tmp_path / "a.wav", voice.synthesize(answer), voice.sample_rate)).text
    assert "print" not in heard.lower() and "http" not in heard.lower() and "asterisk" not in heard.lower()
    assert wer("Result. The answer is blue, see the docs. There is a code block here; see the screen.", heard) <= 0.25


def test_speakable_drops_symbols_and_names_code():
    text = speakable("# Title\n- **one** item\n- `two`\n\n> quoted [link](http://x.y)\n\n```\nrm -rf /\n```\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert "#" not in text and "*" not in text and "`" not in text and "rm -rf" not in text and "|" not in text
    assert "Title." in text and "one item." in text and "quoted link." in text and "code block" in text
    assert "a, b." in text and "1, 2." in text


def test_sentences_stream_before_the_answer_ends():
    stream = SentenceStream()
    assert stream.feed("Paris is the capital") == []
    assert stream.feed(" of France. It lies on the") == ["Paris is the capital of France."]
    assert stream.feed(" Seine.\n\n```py\nx = 1. y = 2. ") == ["It lies on the Seine."]  # the code waits
    assert stream.feed("\n```\nThat is all") == ["(There is a code block here; see the screen.)"]
    assert stream.finish() == ["That is all."]
    assert sentences("One. Two!\n\n- three\n- four") == ["One.", "Two!", "- three", "- four"]


def test_bad_requests(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", open(os.devnull))
    assert main(["say"]) == 2
    assert "needs text" in capsys.readouterr().err
    assert main(["say", "hello", "--out", str(tmp_path / "no" / "such" / "a.wav")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["say", "hello", "--speed", "9", "--out", str(tmp_path / "a.wav")]) == 2
    assert "speed 9.0 is out of range" in capsys.readouterr().err
    assert main(["say", "** ## --", "--out", str(tmp_path / "a.wav")]) == 2
    assert "nothing to say" in capsys.readouterr().err
    assert not (tmp_path / "a.wav").exists()


def test_no_phonemizer_says_how_to_install_it(monkeypatch, voice):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(VoiceUnavailable, match="apt install espeak-ng"):
        voice.synthesize("Hello there.")
