"""Pauses of the cyclic garbage collector that overlap (decode threads) end together: the collector stays off
until the last one ends, and is back on only if it was on before the first."""

from __future__ import annotations

import gc
import threading

from kernelscope.cycles import cycle_collection_paused


def test_overlapping_pauses_keep_the_collector_off_until_the_last_ends():
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with cycle_collection_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with cycle_collection_paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with cycle_collection_paused(), cycle_collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
