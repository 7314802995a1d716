"""Deprecated: the old import path of :mod:`mongoshift.api.migrations`; import from :mod:`mongoshift.api` instead.

Kept for one release as a thin re-export (removed in 0.3).
"""

import warnings

from ..api.migrations import *  # noqa: F403
from ..project.run import run_info  # noqa: F401
from ..project.session import Session, open_session, warn_unlocked  # noqa: F401

warnings.warn("mongoshift.runner.command is deprecated: import from mongoshift.api", DeprecationWarning, stacklevel=2)
