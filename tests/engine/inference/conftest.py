"""Inference tests run torch on one thread: tiny matmuls are slower split across threads,
and the suite shares two cores."""

from __future__ import annotations

import pytest
import torch

from wren.engine.inference.quant.kernels import ISAS


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=ISAS)
def isa(request):
    """Each instruction set's quantized kernels this CPU can run, in turn (skipped where it has none)."""
    from wren.engine.inference.quant import kernels

    chosen = kernels.use_isa(request.param)
    try:
        if chosen != request.param:
            pytest.skip(f"this CPU has no {request.param}")
        yield chosen
    finally:
        kernels.use_isa("")
