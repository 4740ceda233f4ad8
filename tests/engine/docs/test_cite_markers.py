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
