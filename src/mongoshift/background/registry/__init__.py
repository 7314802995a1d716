"""What ``up`` and ``down`` do to a background migration: register it, revert or withdraw it.

May import ``inspect``, ``write``, ``plan`` and ``state``; the lanes are not its business.
"""
