"""One module per benchmark figure (see docs/BENCH.md); bench/run.py runs them."""
