"""Load: turn recorded files into tables. The only place that knows file formats."""
