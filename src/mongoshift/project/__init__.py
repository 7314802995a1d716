"""A project and one connected run of it, with no knowledge of any feature.

``settings`` (the project file and environment), ``connection``, ``run``
(who runs, and the cancel signal), ``lock`` (the lease lock), ``loader`` (the
migration files), ``changelog``, ``declarations`` (reading the declared
collections), ``session`` (one connected run), plus what every layer above
shares: ``server_errors`` (MongoDB error codes), ``redaction`` (what may be
shown or stored), ``own_collections`` and ``user_code`` (calling the
project's own functions).
"""
