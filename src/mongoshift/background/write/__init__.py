"""The one write path: turning a batch of documents into guarded writes.

``batch`` (read, transform, diff and write one batch; ``planned_updates`` is its part before
the write, shared with the preview), ``document`` (the BSON-exact diff and the guards),
``transaction`` (transactional batches), ``job`` (what a transform receives) and
``pipeline_guard`` (the shard-key check around a ``pipeline=``). May import ``plan`` and
``state``.
"""
