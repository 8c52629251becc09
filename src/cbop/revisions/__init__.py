"""Revisions: one immutable ConfigMap per content version, and pods that read theirs.

The whole life of a revision, in order (docs/revisions.md):

- :mod:`.model` (pure): the mapping a pod template carries (``cbop.dev/revisions``),
  the decisions (pin a template, collect a revision, the ``Pinned`` verdict);
- :mod:`.legacy`: 0.2.0's pins, read and never written, across an upgrade.

The ConfigBundle and rollout controllers call these; neither imports the other.
"""
