"""Operator benchmark: cbop against the raw-API floor, controller-runtime and kopf.

``python -m bench.operators`` (``make bench``) starts one local control plane and runs
the scenarios of ``bench.operators.registry`` for each implementation in turn, each in
fresh namespaces, one operator process at a time. See bench/README.md ("Operators") for
what is measured and how.
"""
