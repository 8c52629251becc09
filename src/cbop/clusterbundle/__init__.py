"""The ClusterConfigBundle controller: one configuration kept in every selected namespace.

A ClusterConfigBundle (cluster-scoped) stamps a ConfigBundle into each namespace its
selector selects; the ConfigBundle controller then keeps each namespace's ConfigMap
with every guarantee a bundle has. This package is a peer of :mod:`cbop.configbundle`
on the runtime and imports nothing of it (docs/cluster-bundles.md):

- :mod:`cbop.clusterbundle.decision`: the pure decision (which namespaces, the stamp
  each needs, conflicts, the status);
- :mod:`cbop.clusterbundle.reconcile`: the reconciler that performs it;
- :mod:`cbop.clusterbundle.outcomes`: the failures of the stamp work no stamp shows;
- :mod:`cbop.clusterbundle.controller`: caches, key mapping and the definition.
"""
