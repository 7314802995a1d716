"""Running a migration: the engine on a session, its coordinator and its lanes.

``engine`` (``Engine``: the engine on a connected session, what every command opens),
``drive`` (``MigrationRun``: one migration driven to an end state in this process),
``coordinator`` (passes, partitions, finalization), ``lane`` (one slice on a leased
partition), ``modes`` (one strategy per kind: plain batches, transactional batches, steps),
``context`` (``EngineContext``: what the coordinator and every lane share), ``throttle``,
``health`` (replication lag and server signals), ``share`` (a fair share of lanes
between runners) and ``outage`` (riding out a lost connection). May import ``inspect``, ``write``, ``plan`` and ``state``.
"""
