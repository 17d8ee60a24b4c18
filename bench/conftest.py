"""pytest-benchmark setup: benchmarks run with `pytest bench --benchmark-enable`."""
