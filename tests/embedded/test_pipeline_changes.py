"""Issue 27 item 2 (stop 50): a pipeline update decides which fields changed from the fields its stages
name (:func:`mongoshift.embedded.patches.pipeline_updates._changed`), not from every field of the
document; this proves the two the same for any document and any ``$set``/``$unset`` pipeline the fast
path takes, evaluated by its own :func:`evaluate` (with a stand-in evaluator: references, removals,
new values and the very objects the document holds)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st

from mongoshift.embedded.patches.pipeline_updates import _changed, evaluate, stages, written_fields

MISSING, REMOVE = object(), object()
FIELDS = ["a", "b", "__v", "__rev", "new"]
values = st.integers(-2, 2) | st.text(max_size=2) | st.none() | st.lists(st.integers(0, 1), max_size=2)
expressions = st.sampled_from([f"${name}" for name in FIELDS]) | st.just("$$REMOVE") | st.builds(lambda v: {"$literal": v}, values)
stage = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), expressions, min_size=1, max_size=3).map(lambda spec: {"$set": spec}),
    st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True).map(lambda names: {"$unset": names}),
)


def stand_in(document: dict[str, Any], expression: Any, *_: Any, **__: Any) -> Any:
    """A reference gives the document's own object (or nothing), ``$$REMOVE`` removes, a literal is a new object."""
    if expression == "$$REMOVE":
        return REMOVE
    if isinstance(expression, str):
        return document.get(expression[1:], MISSING)
    return list(expression["$literal"]) if isinstance(expression["$literal"], list) else expression["$literal"]


def every_field(document: dict[str, Any], new_document: dict[str, Any]) -> set[str]:
    """The changed fields found by looking at every field of both documents (the definition before)."""
    changed = {name for name, value in new_document.items() if document.get(name, MISSING) is not value}
    changed.update(name for name in document if name not in new_document)
    return changed


@given(document=st.dictionaries(st.sampled_from(FIELDS[:-1]), values).map(lambda d: {"_id": 1, **d}), pipeline=st.lists(stage, min_size=1, max_size=3))
def test_the_changed_fields_are_found_among_the_fields_the_stages_name(document: dict[str, Any], pipeline: list[dict[str, Any]]) -> None:
    steps = stages(pipeline)
    assert steps is not None
    new_document = evaluate(document, steps, None, None, stand_in, MISSING, REMOVE)
    assert _changed(document, new_document, tuple(written_fields(steps, None))) == every_field(document, new_document)
