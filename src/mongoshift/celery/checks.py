"""The checks of the options ``register()`` takes (``LineOptions``, ``BackgroundOptions``): a wrong value is a
:class:`~mongoshift.errors.ConfigInvalidError` (exit 6) when the options are made, not a worker that spins with a
countdown of 0, gives up at once or holds a migration for ever."""

from __future__ import annotations

import math

from ..errors import ConfigInvalidError

#: The longest lease an intent (a line task's, a background chain's) can hold: what ``api.Claim`` takes.
LEASE_MAX_SECONDS = 7 * 86_400


def check_number(
    owner: str, name: str, value: object, *, minimum: float, above: bool = False, whole: bool = False, maximum: float | None = None
) -> None:
    """``value`` is a finite number (a whole one with ``whole``) of at least ``minimum`` (above it with ``above``) and,
    given ``maximum``, at most that; a bool, a text, NaN or infinity is refused (NaN passes every comparison's "not less than")."""
    kind = int if whole else (int, float)
    fits = (
        not isinstance(value, bool)
        and isinstance(value, kind)
        and math.isfinite(value)
        and (value > minimum if above else value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not fits:
        bound = f"above {minimum:g}" if above else f"at least {minimum:g}"
        if maximum is not None:
            bound += f" and at most {maximum:g}"
        what = "a whole number" if whole else "a number of seconds"
        raise ConfigInvalidError(f"{owner}: {name} must be {what} {bound}, not {value!r}", option=name)
