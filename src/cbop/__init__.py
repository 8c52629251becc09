"""cbop: the ConfigBundle operator.

A ConfigBundle custom resource declares the content of a ConfigMap; cbop keeps the
managed ConfigMap equal to it. The package is layered (outermost first): ``cbop.cli`` ->
``cbop.manager`` -> the controller packages, independent peers (``cbop.configbundle``,
``cbop.rollout``) -> ``cbop.runtime`` -> ``cbop.sharding`` -> ``cbop.informers`` /
``cbop.leaderelection`` / ``cbop.health`` ->
``cbop.metrics`` -> ``cbop.workqueue`` -> ``cbop.kube`` -> ``cbop.api`` -> ``cbop.clock`` /
``cbop.tokenbucket`` / ``cbop.keys`` / ``cbop.defaults`` (every default setting, defined
once). The layering is enforced by import-linter.
"""

__version__ = "0.3.0"
