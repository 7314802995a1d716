"""The engine's state in MongoDB: what a background migration and its partitions are.

``model`` (the records and their states), ``store`` (every read and write of them: the one
write path for engine state), ``controls`` (pause, resume, cancel, retry, repin),
``failures`` (counting and wording document failures) and ``events`` (what the engine tells
observers). The bottom layer of ``background``: it imports nothing else of the engine.
"""
