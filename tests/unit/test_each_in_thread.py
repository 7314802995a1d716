"""A batch's sync transforms in the worker thread, against the loop before issue 27's seventh pass.

The seventh pass turns what is no ``Exception`` (``sys.exit``, ``KeyboardInterrupt``, ...) into the
document's failure inside the batch's loop, without the ``guard_exit`` wrapper call per document.
The reference below is the loop before, kept verbatim: for any batch of outcomes, the same results,
the same failures (type, message, no chained cause) at the same indices, the same error raised out of
the batch, and a traceback on every failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, strategies as st
from pymongo.errors import OperationFailure

from mongoshift.background.write.batch import Transformed, _each_in_thread
from mongoshift.project.server_errors import transient_transaction_error
from mongoshift.project.user_code import guard_exit


def _each_in_thread_before(fn: Callable[..., Any], copies: list[dict[str, Any]], ctx: Any) -> Transformed:
    """The loop before the seventh pass (the wrapper per document)."""
    fn = guard_exit(fn)
    done = Transformed([])
    results, failed = done.results, done.failed
    append = results.append
    for copy in copies:
        try:
            append(fn(copy, ctx))
        except Exception as exc:
            if transient_transaction_error(exc):
                raise
            failed[len(results)] = exc
            append(None)
    return done


def _transient() -> OperationFailure:
    return OperationFailure("write conflict", 112, {"errorLabels": ["TransientTransactionError"], "code": 112})


#: What one document's transform does.
OUTCOMES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "returns": lambda doc: {**doc, "done": True},
    "returns None": lambda doc: None,
    "edits in place": lambda doc: doc.update(done=True) or doc,
    "raises": lambda doc: int("x"),
    "sys.exit": lambda doc: exec("import sys; sys.exit(3)"),
    "sys.exit()": lambda doc: exec("raise SystemExit"),
    "KeyboardInterrupt": lambda doc: exec("raise KeyboardInterrupt"),
    "GeneratorExit": lambda doc: exec("raise GeneratorExit"),
    "BaseException": lambda doc: exec("raise BaseException('odd')"),
    "CancelledError": lambda doc: exec("raise asyncio.CancelledError()", {"asyncio": asyncio}),
}


def _run(loop: Callable[..., Transformed], outcomes: list[str]) -> tuple[str, Any]:
    def migrate(doc: dict[str, Any], ctx: Any) -> Any:
        if outcomes[doc["i"]] == "transient":
            raise _transient()
        return OUTCOMES[outcomes[doc["i"]]](doc)

    try:
        done = loop(migrate, [{"i": i} for i in range(len(outcomes))], None)
    except BaseException as exc:  # what leaves the batch is compared, whatever it is
        return "raised", (type(exc), str(exc))
    for exc in done.failed.values():
        assert exc.__traceback__ is not None and exc.__cause__ is None
    failures = {i: (type(exc), str(exc), exc.__suppress_context__) for i, exc in done.failed.items()}
    return "done", (done.results, failures)


@given(st.lists(st.sampled_from([*OUTCOMES, "transient"]), max_size=8))
def test_the_same_results_and_failures_as_the_wrapper_per_document(outcomes: list[str]) -> None:
    assert _run(_each_in_thread, outcomes) == _run(_each_in_thread_before, outcomes)


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        ("sys.exit", "sys.exit(3) was called; raise an exception to report a failure"),
        ("KeyboardInterrupt", "KeyboardInterrupt was raised"),
    ],
)
def test_an_exit_fails_its_document_alone(outcome: str, message: str) -> None:
    kind, (results, failures) = _run(_each_in_thread, ["returns", outcome, "returns"])
    assert kind == "done"
    assert results[0] == {"i": 0, "done": True} and results[1] is None and results[2] == {"i": 2, "done": True}
    assert [(index, error[0].__name__, error[1]) for index, error in failures.items()] == [(1, "UserCodeExit", message)]
