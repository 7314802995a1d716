"""Looking without running: previews, the sandbox, status, drift and requirements.

``preview`` (what a run would write), ``sandbox`` and ``validate`` (the real write in an
aborted transaction, the transform fenced in), ``status`` (progress, rates, partitions),
``drift`` (old shapes written after completion: ``verify``), ``requires`` and
``input_probe`` (documents a migration would skip). May import ``write``, ``plan`` and
``state``; it never writes a document.
"""
