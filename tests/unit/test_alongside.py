"""Work done on a thread beside a block (workers.alongside): the import writes its run's tables there while the
report's tables are computed."""

from __future__ import annotations

import threading
import time

import pytest

from kernelscope.workers import alongside


def test_the_work_runs_beside_the_block_and_is_done_when_it_ends():
    started, finished = threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        time.sleep(0.05)
        finished.set()

    with alongside(work):
        assert started.wait(5)  # running while the block is still going
        seen_in_block = threading.current_thread() is threading.main_thread()
    assert finished.is_set() and seen_in_block


def test_an_error_of_the_work_is_raised_by_the_block_once_it_ends():
    def work() -> None:
        raise OSError("disk full")

    after_block = []
    with pytest.raises(OSError, match="disk full"), alongside(work):
        after_block.append("block ran")
    assert after_block == ["block ran"]


def test_a_failing_block_waits_for_the_work_and_raises_its_own_error():
    finished = threading.Event()

    def work() -> None:
        time.sleep(0.05)
        finished.set()

    with pytest.raises(KeyError), alongside(work):
        raise KeyError("block")
    assert finished.is_set()  # nothing is still running once the error leaves


def test_no_work_is_no_thread():
    before = threading.active_count()
    with alongside(None):
        assert threading.active_count() == before
