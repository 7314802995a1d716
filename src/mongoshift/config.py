"""Deprecated: the old import path of :mod:`mongoshift.project.settings`; use ``mongoshift.api.load_settings``.

Kept for one release as a thin re-export (removed in 0.3).
"""

import warnings

from .project.settings import *  # noqa: F403
from .project.settings import Settings, load_settings  # noqa: F401

warnings.warn("mongoshift.config is deprecated: import from mongoshift.api", DeprecationWarning, stacklevel=2)
