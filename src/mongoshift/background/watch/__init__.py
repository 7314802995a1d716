"""The live watcher: after completion, upgrade old shapes as the application writes them.

A lease-led change stream per collection, writing through ``write.batch``. The top of the
engine beside ``steps``: it may import every other sub-package.
"""
