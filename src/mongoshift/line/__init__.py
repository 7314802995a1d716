"""The classic migration line: files, changelog, lock, plan, execution."""
