"""Analysis: pure functions from tables to tables. No I/O, no printing, no plotting."""
