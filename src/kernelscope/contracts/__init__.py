"""The contracts between stages: typed run metadata (run.json), key figures (summary.json) and the columns of the
tables every loader produces and every analysis reads. Shared vocabulary like `ranges` and `errors`: any stage
may import it, and it imports no stage (tests/test_contracts.py enforces both)."""
