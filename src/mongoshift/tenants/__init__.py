"""Tenants: one project migrated across many databases of the same schema (docs/tenants.md).

A feature package beside the migration line, converge and telemetry (layer 3): it knows which
databases are the tenants and how to roll a command out across them, but not what the command
is. ``selection`` resolves the ``[tenants]`` section and the command-line flags into an ordered
list, refusing bad input before anything is written; ``rollout`` runs one call per tenant within
a concurrency bound, with canaries, a stop on the first failure and Ctrl-C; ``report`` is the
per-tenant outcome and the exit code. :mod:`mongoshift.api.tenants` gives it the calls to make
(each tenant is a project with its own ``db``: its own changelog, lock and background state).

It imports ``project``, ``schema`` and ``errors`` only (contract ``tenants-feature``).
"""
