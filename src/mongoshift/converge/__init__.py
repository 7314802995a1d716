"""Declared collections and ``converge``: make the server's indexes and validators match the declarations.

One role per module: ``inspection`` (what the server has), ``planner`` (the
difference, as typed actions; pure), ``applier`` (making it, in a fixed
order), ``report`` (what a run planned or did), ``journal`` (the converge log)
and ``run`` (planning and applying on an open session). The declarations
themselves are pure values in :mod:`mongoshift.schema.collections`, read by
:mod:`mongoshift.project.declarations`; the Python API is :mod:`mongoshift.api`.
"""
