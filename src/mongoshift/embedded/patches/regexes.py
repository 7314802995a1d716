"""A regular expression in a query matches a stored regular expression as mongod's does (cx)."""

from __future__ import annotations

import re
from typing import Any

# Python's flags of a compiled pattern that a BSON regex's options give (the others, "l" and "u",
# change nothing Python compiles).
_OPTION_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE


def _canonical(options: str) -> str:
    return "".join(flag for flag in "ilmsux" if flag in options)


# (cx) A query's regular expression never matched a stored regular expression, and `$eq` of one
# matched strings: over `{v: /^a/i}` and `{v: "Abc"}`, `find({v: /^a/i})` (and `$regex`, `$in: [/^a/i]`)
# found the string alone, `$eq: /^a/i` found the string and not the stored regex, `$nin: [/^a/i]`
# kept the stored regex. mongod's RegexMatchExpression matches a string (or symbol) by the pattern and
# a stored regex by equality of its pattern and options; `$eq` (and `$ne`) of a regex is plain BSON
# equality, never a pattern match (mongod's docs, "$eq": "Regex Match Behaviour"). mongoeco tests a
# regex condition against strings only (`FilteringSpecialsMixin._evaluate_regex` for a field's regex,
# `FilteringMatchingMixin._regex_item_matches_candidate` for a regex listed in `$in`/`$nin`, both
# matchers' and fix (k)'s way), and `query_plan._compile_field_condition` turns `$eq` of a regex
# into the same regex condition. The fix adds the stored regex with the same pattern and options to
# both tests, and compiles `$eq` of a regex as an equality (which `$ne` already was).
def patch_regex_matches() -> None:
    from mongoeco.core import query_plan
    from mongoeco.core._filtering_matching import FilteringMatchingMixin
    from mongoeco.core._filtering_specials import FilteringSpecialOperatorsMixin
    from mongoeco.core._filtering_support import compile_bson_regex
    from mongoeco.types import Regex

    original_evaluate = FilteringSpecialOperatorsMixin._evaluate_regex.__func__  # type: ignore[attr-defined]
    original_item = FilteringMatchingMixin._regex_item_matches_candidate.__func__  # type: ignore[attr-defined]
    original_compile = query_plan._compile_field_condition

    def evaluate_regex(cls: Any, doc: dict[str, Any], field: str, pattern: str, options: str) -> bool:
        if original_evaluate(cls, doc, field, pattern, options):
            return True
        wanted = _canonical(options)
        return any(
            isinstance(value, Regex) and value.pattern == pattern and value.flags == wanted
            for value in cls._extract_values(doc, field)
        )

    def regex_item_matches_candidate(cls: Any, candidate: Any, pattern: re.Pattern[str]) -> bool:
        if isinstance(candidate, Regex):
            # A listed regex reaches here compiled (mongoeco's `_prepare_membership_values`): its
            # pattern and the flags its options give are what is compared.
            return (
                candidate.pattern == pattern.pattern
                and compile_bson_regex(candidate).flags & _OPTION_FLAGS == pattern.flags & _OPTION_FLAGS
            )
        return bool(original_item(cls, candidate, pattern))

    def compile_field_condition(field: str, condition: Any, **kwargs: Any) -> Any:
        if isinstance(condition, dict) and isinstance(condition.get("$eq"), (Regex, re.Pattern)):
            value = condition["$eq"]
            if isinstance(value, re.Pattern):
                value = Regex(value.pattern, query_plan._regex_options_from_pattern(value))
            rest = {key: item for key, item in condition.items() if key != "$eq"}
            if not rest:
                query_plan._validate_filter_field_name(field)
                return query_plan.EqualsCondition(field, value)
            others = original_compile(field, rest, **kwargs)
            return query_plan.AndCondition((query_plan.EqualsCondition(field, value), others))
        return original_compile(field, condition, **kwargs)

    FilteringSpecialOperatorsMixin._evaluate_regex = classmethod(evaluate_regex)  # type: ignore[assignment]
    FilteringMatchingMixin._regex_item_matches_candidate = classmethod(  # type: ignore[assignment]
        regex_item_matches_candidate
    )
    query_plan._compile_field_condition = compile_field_condition
