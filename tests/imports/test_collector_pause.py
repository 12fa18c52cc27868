"""imports/collector_pause.py: no cyclic collection inside the block, and the collector left as it was
(on or off, also when the block raises)."""

from __future__ import annotations

import gc

import pytest

from mindformers_tbplugin.imports.collector_pause import collector_paused


def test_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    gc.collect()
    with collector_paused():
        assert not gc.isenabled()
        before = gc.get_count()[0]
        for _ in range(gc.get_threshold()[0] * 3):  # thrice the allocations that start a collection
            node: list = []
            node.append(node)
        assert gc.get_count()[0] >= before + gc.get_threshold()[0] * 3  # none ran: the count only grew
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a reader's error")
    assert gc.isenabled()


def test_a_collector_switched_off_by_its_user_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
