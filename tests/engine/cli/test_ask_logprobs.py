"""`wren ask --json --logprobs N`: each delta's tokens with their probabilities."""

from __future__ import annotations

import json
import math

from tests.engine.cli.conftest import set_reply
from wren.engine.terminal.main import main


def test_ask_json_logprobs_prints_each_tokens_probability_and_alternatives(scripted, capsys):
    set_reply(scripted, "Paris is the capital. ☕")
    assert main(["ask", "--json", "--logprobs", "5", "--temperature", "0", "capital of France?"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    deltas = [e for e in events if e["type"] == "delta"]
    tokens = [t for d in deltas for t in d["logprobs"]]
    assert "".join(t["token"] for t in tokens) == "".join(d["text"] for d in deltas) == "Paris is the capital. ☕"
    for t in tokens:
        assert set(t) == {"token", "id", "logprob", "top"} and len(t["top"]) == 5
        assert 0.0 <= math.exp(t["logprob"]) <= 1.0
        assert t["top"][0]["id"] == t["id"]  # greedy: the chosen token is the likeliest
        assert [a["logprob"] for a in t["top"]] == sorted((a["logprob"] for a in t["top"]), reverse=True)
    assert main(["ask", "--json", "hi"]) == 0  # without it, deltas are as before
    assert all("logprobs" not in json.loads(line) for line in capsys.readouterr().out.splitlines())


def test_ask_logprobs_needs_json_and_a_count_in_range(scripted, capsys):
    assert main(["ask", "--logprobs", "5", "hi"]) == 2
    assert "--logprobs needs --json" in capsys.readouterr().err
    assert main(["ask", "--json", "--logprobs", "50", "hi"]) == 2
    assert "logprobs must be from 0 to 20" in capsys.readouterr().err
