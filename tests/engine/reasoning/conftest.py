"""Models that think: tiny model folders carrying a real chat template of a thinking family
(tests/data/templates/, copied from llama.cpp's models/templates/), answered by the
scripted backend."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
R1_DISTILL = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
SMOLLM3 = "HuggingFaceTB-SmolLM3-3B.jinja"
GPT_OSS = "openai-gpt-oss-120b.jinja"


def template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def thinking_model_dir(base: Path, template_name: str, arch: str = "qwen2") -> Path:
    """The tiny model (its weights unused by the scripted backend) with `template_name` as
    its chat template; `arch` sets config.json's model_type (qwen3 declares <think> tags,
    qwen2 leaves it to the template, as the R1 distills are)."""
    from tests.fixtures.tiny import make_tiny_model_dir

    folder = make_tiny_model_dir(base / f"{arch}-{template_name}", arch=arch)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template(template_name)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def thinking_engine(wren_home: Path, tmp_path: Path) -> Callable:
    """A factory: an Engine whose model has the given real template, answering `reply`
    (a text, or a function of the rendered prompt) through the scripted backend."""
    from tests.fixtures.tiny import tiny_engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    def factory(reply, template_name: str = QWEN3, arch: str = "qwen3", **backend_kwargs):
        scripted = ScriptedBackend(reply, **backend_kwargs)
        folder = thinking_model_dir(tmp_path, template_name, arch)
        engine = tiny_engine(wren_home, folder, backend_factory=lambda name: scripted)
        engine.scripted = scripted
        return engine

    return factory


@pytest.fixture
def server_keys(tmp_path: Path):
    """The server's key store, as tests/engine/server/conftest.py makes it: a real keyring
    backend (keyrings.alt's encrypted file) outside the data folder."""
    from wren.engine.server.keys import open_keys

    return open_keys(key_file=tmp_path / "keyring" / "wren-server-key.cfg", use_key_file=True,
                     environ={"WREN_KEYRING_PASSPHRASE": "a passphrase for tests"})
