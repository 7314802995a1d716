"""``LinkedCancel``: a session runner's signal, set by its own stop or by the session's cancel, never the other way."""

from __future__ import annotations

import threading

from mongoshift.project.run import CancelSignal, LinkedCancel


def test_it_follows_its_parent_with_the_parents_reason() -> None:
    parent = CancelSignal()
    linked = LinkedCancel(parent)
    assert not linked.is_set() and not linked.wait(0)
    parent.set("shutting down")
    assert linked.is_set() and linked.reason == "shutting down"


def test_setting_it_leaves_the_parent_alone() -> None:
    parent = CancelSignal()
    linked = LinkedCancel(parent)
    linked.set("runner stopped")
    assert linked.is_set() and linked.wait(0)
    assert not parent.is_set() and parent.reason is None


def test_a_wait_without_timeout_ends_when_the_parent_is_set_from_another_thread() -> None:
    parent = CancelSignal()
    linked = LinkedCancel(parent)
    waiting = threading.Event()
    woke: list[bool] = []

    def wait() -> None:
        waiting.set()
        woke.append(linked.wait())

    thread = threading.Thread(target=wait)
    thread.start()
    waiting.wait()
    parent.set("stop")
    thread.join()
    assert woke == [True] and linked.reason == "stop"
