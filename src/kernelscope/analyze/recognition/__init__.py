"""Recognising a public model from a trace's own evidence (docs/roofline.md, "Recognised models")."""
