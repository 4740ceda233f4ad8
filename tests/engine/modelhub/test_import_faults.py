"""Bad input through the whole import, as a user meets it: each fault gets a clear error,
nothing half-imported is listed or left on disk, and what was there before is untouched."""

from __future__ import annotations

import asyncio
import errno
import hashlib
from pathlib import Path

import pytest

from wren.engine.errors import ModelFileError, UnsupportedArchitecture, WrenError
from wren.engine.modelhub.registry import ModelRegistry


def _tree(root: Path) -> dict[str, str]:
    """Every file under root with a digest of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def installed(tmp_path, tiny_gguf):
    """A models folder that already holds one good model."""
    registry = ModelRegistry(tmp_path / "models")
    good, _ = tiny_gguf()
    registry.import_gguf(good, name="good")
    return registry


def _truncated(tiny_gguf, tmp_path):
    path, _ = tiny_gguf()
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])  # a download that stopped two thirds in
    return cut


def _shapes_contradict(tiny_gguf, tmp_path):
    path, _ = tiny_gguf(meta={"llama.feed_forward_length": 96})  # the tensors are 128 wide
    return path


def _huge_context(tiny_gguf, tmp_path):
    path, _ = tiny_gguf(meta={"llama.context_length": 2**40})
    return path


def _zero_heads(tiny_gguf, tmp_path):
    path, _ = tiny_gguf(meta={"llama.attention.head_count": 0})
    return path


def _escaping_template(tiny_gguf, tmp_path):
    template = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    path, _ = tiny_gguf(meta={"tokenizer.chat_template": template})
    return path


def _endless_template(tiny_gguf, tmp_path):
    template = "{% for i in range(10**9) %}{% for j in range(10**9) %}x{% endfor %}{% endfor %}"
    path, _ = tiny_gguf(meta={"tokenizer.chat_template": template})
    return path


FAULTS = {
    "truncated download": (_truncated, ModelFileError, "truncated"),
    "shapes contradict metadata": (_shapes_contradict, ModelFileError, "feed_forward"),
    "context of 2^40": (_huge_context, ModelFileError, "context_length"),
    "zero heads": (_zero_heads, ModelFileError, "head_count"),
    "template escaping the sandbox": (_escaping_template, WrenError, "template"),
    "template that never ends": (_endless_template, ModelFileError, "template"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_bad_files_are_refused_and_leave_nothing(installed, tiny_gguf, tmp_path, fault):
    make, error, words = FAULTS[fault]
    source = make(tiny_gguf, tmp_path)
    before = _tree(installed.root)
    with pytest.raises(error, match=words) as caught:
        installed.import_gguf(source, name="new")
    assert isinstance(caught.value, (ModelFileError, UnsupportedArchitecture, WrenError))
    assert [m.name for m in installed.list()] == ["good"]
    assert _tree(installed.root) == before  # no .partial folder, the good model untouched
    assert source.exists()  # the user's file is left where it was


def test_a_full_disk_during_the_copy_undoes_the_import(installed, tiny_gguf, monkeypatch):
    source, _ = tiny_gguf()
    before = _tree(installed.root)
    real_open = open

    class FullDisk:
        """A file whose writes fail as on a full disk once some bytes went in."""

        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def opener(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return FullDisk(handle) if str(path).endswith("model.gguf") and "w" in mode else handle

    monkeypatch.setattr("builtins.open", opener)
    with pytest.raises(ModelFileError, match="full") as caught:
        installed.import_gguf(source, name="new")
    monkeypatch.undo()
    assert "import was undone" in str(caught.value)
    assert [m.name for m in installed.list()] == ["good"]
    assert _tree(installed.root) == before


def test_chats_are_untouched_by_a_failed_import(make_engine, tiny_gguf, tmp_path):
    """Through the Engine, as the window imports: the conversation store is not touched."""
    async def run():
        engine = make_engine()
        try:
            conv = await engine.conversations.create("kept")
            before = [c.title for c in await engine.conversations.list()]
            with pytest.raises(WrenError):
                await engine.models.import_model(_zero_heads(tiny_gguf, tmp_path), name="broken")
            assert [c.title for c in await engine.conversations.list()] == before
            assert (await engine.conversations.get(conv.id)).title == "kept"
            assert all(m.name != "broken" for m in await engine.models.installed())
        finally:
            await engine.close()

    asyncio.run(run())


@pytest.mark.parametrize("keep", [0.02, 2 / 3])  # cut inside the header, or inside the tensor data
def test_a_file_wren_cannot_run_is_refused_before_it_is_copied(installed, tiny_gguf, tmp_path, keep):
    """The header is checked from the user's file first: refused in a moment, with the copy's
    progress bar never started (it reached 100% of a many-GB copy before the refusal)."""
    path, _ = tiny_gguf()
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep)])
    reported: list[tuple[int, int]] = []
    with pytest.raises(ModelFileError, match="truncated") as caught:
        installed.import_gguf(cut, name="new", progress=lambda done, total: reported.append((done, total)))
    assert str(cut) in str(caught.value) and "header.gguf" not in str(caught.value)
    assert reported == []
    assert [m.name for m in installed.list()] == ["good"]
