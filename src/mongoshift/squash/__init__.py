"""Squash: replacing the applied files at the start of the line with one squash file.

``planner`` decides, from the files and one database's changelog, whether a squash up to
NAME can be made and what it replaces (pure); ``writer`` archives the replaced files and
writes the squash file, all or nothing. How the line runs a squash file afterwards is the
line's business (:func:`mongoshift.line.plan.fold_squashes`); how a squash file is read is
the project's (:mod:`mongoshift.project.squashes`).
"""
