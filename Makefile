# cbop developer entry points. `make dev` and `make test` set up everything they need
# on a fresh machine: a virtualenv in .venv, the package, and the local control plane
# binaries (built once from the pinned Go modules into ~/.cache/cbop).
SHELL := bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help all venv binaries tools test test-unit test-tooling test-e2e lint crds fmt dev \
        dev-cluster dev-cluster-down run install uninstall deploy undeploy bench clean release

.DEFAULT_GOAL := all

# `make help` prints every target with the text after its `## `.
help: ## list the targets
	@awk -F ':.*## ' '/^[a-zA-Z0-9_-]+:.*## / { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

all: lint test ## lint, then every test

# cbop and, apart from it, its test support (testing/: the local control plane and node,
# the fake clock), which the cbop wheel and the image never contain. Both take their
# version from src/cbop/__init__.py (hack/version.py): a new version reinstalls them, so
# the installed metadata says the same.
$(VENV)/.installed: pyproject.toml testing/pyproject.toml src/cbop/__init__.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./testing
	touch $@

venv: $(VENV)/.installed ## .venv with cbop and cbop-testing (editable) and the dev tools

# Builds (or reuses) kube-apiserver, kube-controller-manager, kubectl and etcd.
binaries: ## build (or reuse) etcd, kube-apiserver, kube-controller-manager, kubectl
	@hack/build-control-plane.sh >/dev/null

# promtool (Debian's prometheus package) checks the /metrics exposition in the e2e tests.
tools: ## install promtool (Debian's prometheus) when missing
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing promtool (Debian package prometheus)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "promtool is missing: install Debian's prometheus package" >&2; exit 1; fi; }

# Lint first: a broken contract, a type error or a format slip fails in a minute,
# before the tests. Then the tiers in one pytest session on
# TEST_WORKERS pytest-xdist workers: the e2e and tooling tests mostly wait (lease
# expiries, quiet windows, control-plane starts), so several run at once even on two
# cores. tests/workers.py keeps a module, the modules of a shared control plane, and
# the node tests each on one worker; each worker has its own control planes.
# TEST_WORKERS=0: one process, serially. README.md, "Tests", describes the tiers.
TIERS := tests/unit tests/tooling tests/e2e
TEST_WORKERS ?= 3
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)

# The control-plane build (`make binaries`: CPU-bound, minutes when cold) starts first,
# in the background, and the virtualenv (downloads), lint and promtool come meanwhile;
# pytest starts when all are done. A failing step stops the build (its process group
# is killed; what Go compiled so far stays in its build cache), so lint still fails
# within a minute. tests/builds.py starts the node, helm and image builds the selected
# tests need as soon as pytest has collected them.
test: ## lint, then the unit, tooling and e2e tests (PYTEST_ARGS=..., TEST_WORKERS=3)
	@setsid hack/build-control-plane.sh >/dev/null & build=$$!; \
	  trap 'kill -- -$$build $$build 2>/dev/null' EXIT; \
	  $(MAKE) --no-print-directory venv lint tools || exit; \
	  wait $$build || { echo "make test: hack/build-control-plane.sh failed (its error is above)" >&2; exit 1; }; \
	  trap - EXIT
	$(PY) -m pytest $(XDIST) $(TIERS) $(PYTEST_ARGS)

test-unit: venv ## the operator's unit tests (under a minute; TEST_WORKERS=3)
	$(PY) -m pytest $(XDIST) tests/unit $(PYTEST_ARGS)

test-tooling: venv binaries ## tests of the Makefile, hack/ scripts and the local control plane
	$(PY) -m pytest $(XDIST) tests/tooling $(PYTEST_ARGS)

test-e2e: venv binaries tools ## e2e tests against a local control plane (TEST_WORKERS=3)
	$(PY) -m pytest $(XDIST) tests/e2e $(PYTEST_ARGS)

# Each checkout has its own local control plane, kept in DEV_CLUSTER_DIR.
DEV_CLUSTER_DIR ?= $(CURDIR)/.dev-cluster
# Where `make dev` serves cbop's /metrics and /healthz + /readyz (loopback only).
METRICS_ADDR ?= 127.0.0.1:8080
PROBE_ADDR ?= 127.0.0.1:8081
# 1: `make dev` uses the control plane already running in DEV_CLUSTER_DIR (and leaves it
# running); otherwise a running one is an error, so make dev never stops what it did not start.
REUSE_CLUSTER ?=
ENVTEST := $(PY) -m cbop_testing.envtest --state-dir $(DEV_CLUSTER_DIR)

# A fresh machine to a running operator: local control plane, CRD, samples, then cbop in
# the foreground. Ctrl-C stops cbop and the control plane it started. See hack/dev.sh.
dev: venv binaries $(if $(WITH_NODE),image node-binaries) ## control plane, CRD, samples, then cbop in the foreground (WITH_NODE=1: as pods)
	@DEV_CLUSTER_DIR=$(DEV_CLUSTER_DIR) METRICS_ADDR=$(METRICS_ADDR) PROBE_ADDR=$(PROBE_ADDR) \
	  REUSE_CLUSTER=$(REUSE_CLUSTER) WITH_NODE='$(WITH_NODE)' hack/dev.sh $(CBOP_ARGS)

# cbop against the current kubeconfig (the CRD must be installed: make install). It
# listens on cbop's defaults, :8080 and :8081 on all interfaces, unless CBOP_ARGS says else.
run: venv ## cbop against the current kubeconfig (CBOP_ARGS=...)
	$(VENV)/bin/cbop $(CBOP_ARGS)

# A local control plane (etcd, kube-apiserver, kube-controller-manager with its default
# controllers) for development, detached so it outlives make; prints `export
# KUBECONFIG=...` (also in $(DEV_CLUSTER_DIR)/env). Already running: reuses it and says
# so. WITH_NODE=1 adds a kubelet node with cbop:dev loaded (kubectl logs and exec work).
# See docs/control-plane.md.
dev-cluster: venv binaries $(if $(WITH_NODE),image node-binaries) ## this checkout's control plane, in the background (WITH_NODE=1: plus a node)
	@$(ENVTEST) start --detach $(if $(WITH_NODE),--with-node)

dev-cluster-down: venv ## stop this checkout's control plane
	@$(ENVTEST) stop

# hack/modsize.py: at most 400 code lines per module (docstrings, comments and blank
# lines not counted) in src, testing, bench and hack.
lint: venv ## ruff format check, ruff, mypy strict, import-linter, module size, hadolint
	$(VENV)/bin/ruff format --check src testing tests bench hack
	$(VENV)/bin/ruff check src testing tests bench hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) hack/modsize.py check
	$(VENV)/bin/hadolint --config .hadolint.yaml Dockerfile

# The CRDs of manifests/crd/ and charts/cbop/crds/ are written from hack/crds/.
crds: venv ## write the CRDs from their sources in hack/crds/
	$(PY) hack/gen-crds.py

fmt: venv ## ruff format and ruff --fix
	$(VENV)/bin/ruff format src testing tests bench hack
	$(VENV)/bin/ruff check --fix src testing tests bench hack

# --- The cluster of the current kubeconfig (docs/deploy.md) ---------------------------
# kubectl: $KUBECTL if set, else the one built with the local control plane.
KUBECTL ?= $$(hack/build-control-plane.sh)/kubectl

# Every CRD cbop serves (manifests/crd/: ConfigBundle, ClusterConfigBundle), and waits
# until the API server serves them, so `kubectl apply -f manifests/samples/` works next.
install: ## apply every CRD cbop serves to the current kubeconfig's cluster
	$(KUBECTL) apply -f manifests/crd/
	hack/wait-crds.sh $(KUBECTL)

# Deletes the CRDs and with them every ConfigBundle. Bundles with deletionPolicy Orphan
# carry cbop's finalizer: a running cbop releases them; if it does not within 5 s, the
# script runs `cbop release --all`, which releases them as cbop would. It never hangs:
# see hack/uninstall.py.
UNINSTALL_ARGS ?=
uninstall: venv ## delete the CRD and every ConfigBundle; says what stays behind
	@$(PY) hack/uninstall.py $(UNINSTALL_ARGS)

# CRD, namespace, RBAC, Deployment and metrics Service: kubectl apply -k manifests/;
# IMG=name:tag replaces the image (e.g. IMG=cbop:dev on `make dev-cluster WITH_NODE=1`).
deploy: ## kubectl apply -k manifests/ (IMG=name:tag overrides the image)
	@KUBECTL="$(KUBECTL)" IMG='$(IMG)' hack/deploy.sh

# Removes the operator (Deployment first, so the replicas shut down and release the
# Lease) but keeps the CRD and the ConfigBundles; `make uninstall` removes those.
undeploy: ## remove the operator; keep the CRD and the ConfigBundles
	$(KUBECTL) delete --ignore-not-found -f manifests/deployment.yaml -f manifests/service.yaml
	$(KUBECTL) delete --ignore-not-found -k manifests/rbac/
	$(KUBECTL) delete --ignore-not-found -f manifests/namespace.yaml

clean: ## remove .venv and the build and tool caches
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache

# Operator benchmark (bench/README.md, "Operators"): cbop against the raw API floor,
# controller-runtime and kopf on a fresh local control plane. Not part of `make test`.
# The full run takes 40-60 minutes and writes its results files into bench/results/.
BENCH_ARGS ?=
bench: venv binaries ## operator benchmark, 40-60 min; results into bench/results/
	$(PY) -m bench.operators $(BENCH_ARGS)

.PHONY: bench-quick
bench-quick: venv binaries ## short operator benchmark into $TMPDIR/cbop-bench
	$(PY) -m bench.operators --quick --out $${TMPDIR:-/tmp}/cbop-bench $(BENCH_ARGS)

# --- A release (README, "Installing a release") --------------------------------------
# The wheel and sdist, the image as an OCI archive, the chart, install.yaml and
# SHA256SUMS, into DIST. Stops first if a copy of the version differs (hack/version.py).
DIST ?= dist
release: venv ## wheel, sdist, image (OCI archive), chart, install.yaml, SHA256SUMS into DIST (dist/)
	@DIST='$(DIST)' PYTHON='$(PY)' BASE_IMAGE='$(BASE_IMAGE)' hack/release.sh

# --- The container image and the local node (docs/deploy.md, docs/control-plane.md) ---
# WITH_NODE=1 on `make dev-cluster` / `make dev` adds a kubelet node with cbop:dev.
WITH_NODE ?=
# `make image`: podman builds the Dockerfile, tagged cbop:<version> and cbop:dev.
# BASE_IMAGE=local (default) builds on a Debian base made here without a registry;
# BASE_IMAGE=docker.io/library/python:3.11.14-slim-trixie uses the Dockerfile's default.
BASE_IMAGE ?= local
.PHONY: image node-binaries
image: ## build the image with podman, tagged cbop:<version> and cbop:dev
	@BASE_IMAGE='$(BASE_IMAGE)' hack/image/build.sh

# kubelet, kube-scheduler and containerd 2 for the local node (WITH_NODE=1).
node-binaries: ## build kubelet, kube-scheduler and containerd for the local node
	@hack/build-node.sh >/dev/null
