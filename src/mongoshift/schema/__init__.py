"""Declared values with no I/O: collections, indexes, validators, versioning, ``Background`` specs.

What a project writes down, validated and normalised; reading files and
talking to the server happen in the layers above.
"""
