"""A local MongoDB-compatible server for development and tests (mongoeco, patched).

``import mongoshift.embedded`` works without mongoeco; starting a server needs
``pip install "mongoshift[embedded]"``. See docs/embedded.md.
"""

from mongoshift.embedded.server import AddressUnavailable, EmbeddedServerUnavailable, print_uri, run, serve

__all__ = ["AddressUnavailable", "EmbeddedServerUnavailable", "print_uri", "run", "serve"]
