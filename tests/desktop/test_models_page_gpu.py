"""The Models page says how many of an installed model's layers fit the GPU. No GPU is here:
WREN_GPU_MEMORY stands for one (the memory Wren may use), as it caps a real one."""

from __future__ import annotations

import pytest

from wren.engine.inference.placement import (
    DEFAULT_SLOTS,
    RESERVE_BYTES,
    dense_model_bytes,
    gpu_budget,
    plan_layers,
)
from wren.engine.modelhub.catalog import load_catalog


@pytest.fixture
def installed_row(open_window, qtbot):
    """The tiny model's row on a freshly opened Models page."""
    dialogs = []

    def open_row():
        window = open_window()
        dialog = window.open_models()
        dialogs.append(dialog)
        page = dialog.page
        qtbot.waitUntil(lambda: len(page.catalog_rows) == len(load_catalog()) and bool(page.installed_rows),
                        timeout=5000)
        return page.installed_rows["tiny"]

    yield open_row
    for dialog in dialogs:
        dialog.close()


def _tiny_bytes(tiny_model_dir):
    import json

    return dense_model_bytes(json.loads((tiny_model_dir / "config.json").read_text()), 2)


def test_a_model_that_fits_shows_all_its_layers_on_the_gpu(installed_row, monkeypatch):
    monkeypatch.setenv("WREN_GPU_MEMORY", "12GiB")
    row = installed_row()
    assert row.gpu_label.isVisibleTo(row)
    assert row.gpu_label.text() == "All 2 layers on the GPU"
    assert row.gpu_label.toolTip() == "a GPU with 12.0 GiB (WREN_GPU_MEMORY)"
    assert row.gpu_label.accessibleName() == "tiny: All 2 layers on the GPU"


def test_a_model_too_big_for_the_gpu_shows_the_split(installed_row, tiny_model_dir, monkeypatch):
    model = _tiny_bytes(tiny_model_dir)
    context = min(8192, model.max_context)
    # room for the head (a tied one is the embedding table) and one layer with its share of
    # the cache, not two
    free = (RESERVE_BYTES + model.head_bytes + (model.embed_bytes if model.tied else 0) + model.layer_bytes[0]
            + model.kv_bytes_per_token_layer * DEFAULT_SLOTS * context)
    assert plan_layers(model, free, slots=DEFAULT_SLOTS).gpu_layers == 1
    monkeypatch.setenv("WREN_GPU_MEMORY", str(free))
    row = installed_row()
    assert row.gpu_label.text() == "1 of 2 layers on the GPU, the rest on the CPU"
    monkeypatch.setenv("WREN_GPU_MEMORY", str(RESERVE_BYTES))  # not one layer: the CPU
    assert installed_row().gpu_label.text() == "Too big for the GPU: runs on the CPU"


def test_without_a_gpu_the_row_says_nothing_of_one(installed_row, monkeypatch):
    monkeypatch.delenv("WREN_GPU_MEMORY", raising=False)
    if gpu_budget() is not None:
        pytest.skip("this computer has a CUDA GPU")
    row = installed_row()
    assert not row.gpu_label.isVisibleTo(row) and row.gpu_label.text() == ""
