"""The tenant project of tests/tenants, for the squash across tenants."""

from ..tenants.conftest import tenant_project  # noqa: F401  (a fixture, used by name)
