"""Deciding what to read: partitions of a collection and the key ranges of each batch.

``planner`` (``_id`` ranges), ``key_filter`` and ``bson_order`` (BSON key order and range
filters), ``shard_plan``, ``shards`` and ``shard_pass`` (a sharded collection's chunks as
partitions), ``hash_drain`` (hashed shard keys read by hash range) and ``declared`` (a spec
aligned with its declared collection). May import ``state`` only.
"""
