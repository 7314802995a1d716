"""The checks of the options ``register()`` takes (``LineOptions``, ``BackgroundOptions``): a wrong value is a
:class:`~mongoshift.errors.ConfigInvalidError` (exit 6) when the options are made, not a worker that spins with a
countdown of 0, gives up at once or holds a migration for ever."""

from __future__ import annotations

import math

from ..errors import ConfigInvalidError


def check_number(owner: str, name: str, value: object, *, minimum: float, above: bool = False, whole: bool = False) -> None:
    """``value`` is a finite number (a whole one with ``whole``) of at least ``minimum`` (above it with ``above``);
    a bool, a text, NaN or infinity is refused (NaN passes every comparison's "not less than")."""
    kind = int if whole else (int, float)
    fits = (
        not isinstance(value, bool)
        and isinstance(value, kind)
        and math.isfinite(value)
        and (value > minimum if above else value >= minimum)
    )
    if not fits:
        bound = f"above {minimum:g}" if above else f"at least {minimum:g}"
        what = "a whole number" if whole else "a number of seconds"
        raise ConfigInvalidError(f"{owner}: {name} must be {what} {bound}, not {value!r}", option=name)
