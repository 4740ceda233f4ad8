"""Control characters and escape sequences from a model never reach the terminal whole."""

from __future__ import annotations

import io

import pytest

from wren.engine.terminal.output import Output, TerminalFilter, clean, is_control

ESC = "\x1b"
CASES = [
    (f"plain {ESC}[31mred{ESC}[0m text", "plain red text"),  # SGR colour
    (f"{ESC}[2J{ESC}[H{ESC}[?25lwiped", "wiped"),  # clear screen, home, hide cursor
    (f"a{ESC}[1;31;4mb", "ab"),
    (f"{ESC}]0;owned title\x07after", "after"),  # OSC window title, BEL-terminated
    (f"{ESC}]52;c;ZWNobyBwd25lZA=={ESC}\\after", "after"),  # OSC 52 clipboard, ST-terminated
    (f"{ESC}]8;;http://evil.example/{ESC}\\click{ESC}]8;;{ESC}\\", "click"),  # OSC 8 link: its text stays
    (f"{ESC}P1$r0m{ESC}\\x", "x"),  # DCS
    (f"{ESC}(Bascii", "ascii"),  # designate G0 (an intermediate byte)
    (f"{ESC}7save{ESC}8", "save"),  # two-character sequences
    ("\x9b31mC1 CSI\x9b0m", "C1 CSI"),
    ("\x9d0;title\x9cshown", "shown"),  # C1 OSC ended by C1 ST
    ("bell\x07 back\bspace cr\rnul\x00 del\x7f c1\x85", "bell backspace crnul del c1"),
    ("tabs\tand\nnewlines\n", "tabs\tand\nnewlines\n"),  # kept
    ("windows\r\nline", "windows\nline"),
    (f"{ESC}\nkept", "\nkept"),  # ESC then a control: the newline still counts
    (f"{ESC}]0;never ended\nnext line", "\nnext line"),  # an open OSC ends at the line
    ("héllo — 日本語 🐦", "héllo — 日本語 🐦"),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_sequences_go_whole_and_text_stays(raw, expected):
    assert clean(raw) == expected
    assert not any(is_control(c) and c not in "\n\t" for c in clean(raw))


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_a_sequence_split_between_deltas_is_still_removed(raw, expected):
    for cut in range(len(raw) + 1):
        f = TerminalFilter()
        assert f.feed(raw[:cut]) + f.feed(raw[cut:]) == expected, cut
    f = TerminalFilter()
    assert "".join(f.feed(c) for c in raw) == expected


def test_every_control_character_is_removed():
    for code in [*range(0x20), *range(0x7F, 0xA0)]:
        c = chr(code)
        expected = c + "x" if c in "\t\n" else "\nx"
        # the newline after it ends whatever it may have started
        assert clean(c + ("x" if c in "\t\n" else "\nx")) == expected, hex(code)


def test_output_filters_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    answer = f"{ESC}[31mred{ESC}[0m"
    piped, tty = io.StringIO(), Tty()
    Output(piped).write(answer)
    Output(tty).write(answer)
    assert piped.getvalue() == answer  # a pipe gets the bytes as they came
    assert tty.getvalue() == "red"


def test_end_forgets_an_open_sequence():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    out = Output(tty)
    out.write(f"answer{ESC}]0;left open")
    out.end()
    out.write("next answer")
    assert tty.getvalue() == "answernext answer"
