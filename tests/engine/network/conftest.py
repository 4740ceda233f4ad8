"""The network guard on in this test process (it cannot be taken out again: it goes inert
after each test), over the test's own WREN_HOME."""

from __future__ import annotations

import pytest


@pytest.fixture
def guarded(wren_home):
    from wren.engine.network import guard

    guard.install("test")
    yield wren_home
    guard.deactivate()


@pytest.fixture
def locked(guarded):
    from wren.engine.network import lock

    lock.set_offline(True)
    yield guarded
    lock.set_offline(False)


def entries():
    from wren.engine.network import ledger

    return ledger.entries()
