"""One module per benchmark figure (see docs/reports/BENCH.md); bench/run.py runs them."""
