"""Test support for cbop, shipped apart from the operator (the ``cbop-testing`` distribution).

* :mod:`cbop_testing.clock`: ``FakeClock``, a clock that tests drive by hand.
* :mod:`cbop_testing.fakekube`: a fake API server for unit tests (``FakeKube`` over an
  ``ObjectTracker``), as client-go's fake clientset.
* :mod:`cbop_testing.envtest`: a real local Kubernetes control plane (etcd,
  kube-apiserver, kube-controller-manager) and a kubelet node, for tests and
  ``make dev``; ``python -m cbop_testing.envtest start|stop|status``.

The operator (``cbop``) never imports this package (an import-linter contract), so the
cbop wheel holds only the runtime. ``make venv`` installs both, editable.
"""
