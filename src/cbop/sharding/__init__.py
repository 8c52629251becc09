"""Sharding the work across replicas: one Lease per shard, balanced over live replicas.

The package may import ``cbop.leaderelection``, ``cbop.informers``, ``cbop.kube`` and the
pure layers below them; the runtime builds on it (an import-linter layer).
"""
