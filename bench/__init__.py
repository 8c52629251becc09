"""cbop benchmarks, each runnable as ``python -m bench.<name>`` from the repo root."""
