"""Deprecated: the old import path of :mod:`mongoshift.api.background`; import from :mod:`mongoshift.api` instead.

Kept for one release as a thin re-export (removed in 0.3).
"""

import warnings

from ..api.background import *  # noqa: F403

warnings.warn("mongoshift.background.command is deprecated: import from mongoshift.api", DeprecationWarning, stacklevel=2)
