"""StopStringMatcher: nothing of a stop string is ever shown, everything else is."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wren.engine.inference.stops import StopStringMatcher

# A small alphabet makes partial and overlapping matches common.
ALPHABET = "ab#\n<|é"
texts = st.text(alphabet=ALPHABET, max_size=60)
stops = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=5), min_size=1, max_size=3)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def run(matcher: StopStringMatcher, chunks: list[str]) -> tuple[list[str], bool]:
    shown, hit = [], False
    for chunk in chunks:
        safe, hit = matcher.feed(chunk)
        shown.append(safe)
        if hit:
            break
    if not hit:
        shown.append(matcher.flush())
    return shown, hit


@settings(max_examples=400, deadline=None)
@given(text=texts, stop_strings=stops, cuts=st.lists(st.integers(0, 200), max_size=12))
def test_output_is_the_text_before_the_first_stop_string(text, stop_strings, cuts):
    shown, hit = run(StopStringMatcher(stop_strings), split(text, cuts))
    # The stop string that completes first ends the stream (as it would, character by
    # character); ties on the end go to the one that starts earlier.
    found = [(i + len(s), i) for s in stop_strings if (i := text.find(s)) >= 0]
    expected = text[: min(found)[1]] if found else text
    assert hit == bool(found)
    assert "".join(shown) == expected
    # At no point has more than the safe prefix been shown: every partial output is a
    # prefix of the expected text, so not one character of a stop string ever leaks.
    so_far = ""
    for piece in shown:
        so_far += piece
        assert expected.startswith(so_far)


@settings(max_examples=200, deadline=None)
@given(stop_strings=stops, cuts=st.lists(st.integers(0, 200), max_size=12), data=st.data())
def test_text_without_a_stop_string_passes_unchanged(stop_strings, cuts, data):
    text = data.draw(texts.filter(lambda t: not any(s in t for s in stop_strings)))
    shown, hit = run(StopStringMatcher(stop_strings), split(text, cuts))
    assert not hit
    assert "".join(shown) == text


def test_only_a_possible_start_of_a_stop_string_is_held_back():
    m = StopStringMatcher(["</answer>"])
    assert m.feed("Hello </ans") == ("Hello ", False)
    assert m.feed("wer") == ("", False)
    assert m.feed("> more") == ("", True)
    assert m.feed("ignored") == ("", True)
    assert m.flush() == ""


def test_a_false_start_is_released_as_soon_as_it_diverges():
    m = StopStringMatcher(["###"])
    assert m.feed("a##") == ("a", False)
    assert m.feed("b") == ("##b", False)
    assert m.feed("##") == ("", False)
    assert m.flush() == "##"


def test_first_completed_stop_wins_and_empty_stops_are_ignored():
    # "cd" completes before "bcde" does, whether the text comes whole or in pieces.
    assert StopStringMatcher(["", "cd", "bcde"]).feed("abcdef") == ("ab", True)
    m = StopStringMatcher(["cd", "bcde"])
    assert m.feed("abc") == ("a", False)
    assert m.feed("def") == ("b", True)
    assert StopStringMatcher(["d", "cd"]).feed("abcd") == ("ab", True)
    assert StopStringMatcher([]).feed("anything") == ("anything", False)
