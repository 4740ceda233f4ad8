"""Which [n] of an answer are citations, and the answer's text once those that name no
passage of its prompt are dropped: code and Markdown links are never touched."""

from __future__ import annotations

from wren.engine.library.cite import cited_numbers, without_uncited

ANSWER = ("The thermocouple failed [1]. See also [7].\n\n```python\nreading = probes[7]\n```\n"
          "Check `sensors[2]` first [1, 7], then [the manual][3] and [8](https://example.org).\n[9]: https://x")


def test_markers_in_code_and_links_are_not_citations():
    assert cited_numbers(ANSWER) == [1, 7]


def test_an_uncited_marker_is_dropped_with_its_space_and_the_rest_stays():
    assert without_uncited(ANSWER, [1]) == (
        "The thermocouple failed [1]. See also.\n\n```python\nreading = probes[7]\n```\n"
        "Check `sensors[2]` first [1], then [the manual][3] and [8](https://example.org).\n[9]: https://x")


def test_nothing_changes_when_every_marker_names_a_passage():
    assert without_uncited(ANSWER, [1, 7]) == ANSWER
    assert without_uncited("No markers here.", []) == "No markers here."


def test_an_open_fence_runs_to_the_end():
    text = "Use this [4]:\n```\nx = a[4]\n"
    assert cited_numbers(text) == [4]
    assert without_uncited(text, []) == "Use this:\n```\nx = a[4]\n"


def _passages():
    from wren.engine.library.retrieve import Passage

    return [Passage(11, "/docs/kiln.md", {"lines": [5, 5]}, "Error E-3 means the thermocouple failed and must be "
                    "replaced.", 1.0, 12),
            Passage(12, "/docs/policy.docx", {}, "The company pays half of a monthly public transport pass.", 0.9, 11),
            Passage(13, "/docs/cake.txt", {}, "Bake the lemon cake for forty minutes.", 0.8, 8)]


def test_an_answer_without_markers_cites_the_passage_it_quotes():
    from wren.engine.library.cite import citations

    got = citations("Good news: the company pays half of a monthly pass for the bus.", _passages(), [11, 12, 13],
                    "Does my employer help with commuting costs?")
    assert [(c.number, c.path) for c in got] == [(2, "/docs/policy.docx")]


def test_restating_the_question_quotes_nothing_and_a_passage_not_held_is_not_cited():
    from wren.engine.library.cite import citations

    question = "How long should I bake the lemon cake for?"
    assert citations("You should bake the lemon cake for as long as it takes.", _passages(), [11, 12, 13], question) == []
    assert citations("Bake the lemon cake for forty minutes.", _passages(), [11, 12], "Cake timing?") == []
    named = citations("See kiln.md: it explains the code.", _passages(), [11, 12, 13], "What is E-3?")
    assert [c.number for c in named] == [1]


def test_a_marker_wins_over_quoting():
    from wren.engine.library.cite import citations

    got = citations("The company pays half of a monthly public transport pass [1].", _passages(), [11, 12, 13], "")
    assert [c.number for c in got] == [1]

