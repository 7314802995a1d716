"""The ``mongoshift`` command line: a thin layer over :mod:`mongoshift.api`."""
