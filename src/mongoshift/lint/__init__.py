"""``mongoshift lint``: risky operations found in migration files before they run (docs/lint.md).

``rules`` names and documents each rule; ``checker`` reads one file as source with ``ast``
(never importing it: linting runs no project code, needs no database, and sees what a
file would do on any database); ``suppressions`` reads the per-file comments that accept
a finding with a reason. Collection sizes, when asked for, are added by the API, which
has the connection.
"""
