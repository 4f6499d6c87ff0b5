"""Exports: a run in the shapes other tools read (nsys kernel summaries, Perfetto traces; docs/export.md)."""
