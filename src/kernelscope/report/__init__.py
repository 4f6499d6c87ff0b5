"""Report: render tables and figures into files. No analysis beyond formatting."""
