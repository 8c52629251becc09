"""Operator benchmark: cbop against the raw-API floor, controller-runtime and kopf.

``python -m bench.operators`` (``make bench``) starts one local control plane and runs
the scenarios (S1 burst, S2 drift heal, S3 idle cost, S4 memory, S5 API cost) for each
implementation in turn, each in fresh namespaces, one operator process at a time. See
bench/README.md ("Operators") for what is measured and how.
"""
