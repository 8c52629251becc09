# cbop developer entry points. `make dev` and `make test` set up everything they need
# on a fresh machine: a virtualenv in .venv, the package, and the local control plane
# binaries (built once from the pinned Go modules into ~/.cache/cbop).
SHELL := bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: all venv binaries tools test test-unit test-e2e lint fmt dev dev-cluster dev-cluster-down \
        run install uninstall deploy undeploy bench clean

all: lint test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

# Builds (or reuses) kube-apiserver, kube-controller-manager, kubectl and etcd.
binaries:
	@hack/build-control-plane.sh >/dev/null

# promtool (Debian's prometheus package) checks the /metrics exposition in the e2e tests.
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing promtool (Debian package prometheus)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "promtool is missing: install Debian's prometheus package" >&2; exit 1; fi; }

test: venv binaries tools
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-e2e: venv binaries tools
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# A fresh machine to a running operator: local control plane, CRD, samples, then cbop in
# the foreground. Ctrl-C stops cbop and the control plane.
dev: venv binaries $(if $(WITH_NODE),image node-binaries)
	@WITH_NODE='$(WITH_NODE)' hack/dev.sh

# cbop against the current kubeconfig (the CRD must be installed: make install).
run: venv
	$(VENV)/bin/cbop $(CBOP_ARGS)

# A local control plane (etcd, kube-apiserver, kube-controller-manager) for development,
# detached so it outlives make; prints `export KUBECONFIG=...` (also in
# ${XDG_CACHE_HOME:-~/.cache}/cbop/dev-cluster/env). See docs/control-plane.md.
dev-cluster: venv binaries $(if $(WITH_NODE),image node-binaries)
	@$(PY) -m cbop.envtest start --detach $(if $(WITH_NODE),--with-node)

dev-cluster-down: venv
	@$(PY) -m cbop.envtest stop

lint: venv
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint --config .hadolint.yaml Dockerfile

fmt: venv
	$(VENV)/bin/ruff format src tests bench
	$(VENV)/bin/ruff check --fix src tests bench

# --- The cluster of the current kubeconfig (docs/deploy.md) ---------------------------
# kubectl: $KUBECTL if set, else the one built with the local control plane.
KUBECTL ?= $$(hack/build-control-plane.sh)/kubectl

# The ConfigBundle CRD only.
install:
	$(KUBECTL) apply -f manifests/crd/cbop.dev_configbundles.yaml

# Deletes the CRD and with it every ConfigBundle. Run it while cbop still runs: bundles
# with deletionPolicy Orphan carry a finalizer that only cbop removes.
uninstall:
	$(KUBECTL) delete --ignore-not-found -f manifests/crd/cbop.dev_configbundles.yaml

# CRD, namespace, RBAC, Deployment and metrics Service: kubectl apply -k manifests/;
# IMG=name:tag replaces the image (e.g. IMG=cbop:dev on `make dev-cluster WITH_NODE=1`).
deploy:
	@KUBECTL="$(KUBECTL)" IMG='$(IMG)' hack/deploy.sh

# Removes the operator (Deployment first, so the replicas shut down and release the
# Lease) but keeps the CRD and the ConfigBundles; `make uninstall` removes those.
undeploy:
	$(KUBECTL) delete --ignore-not-found -f manifests/deployment.yaml -f manifests/service.yaml
	$(KUBECTL) delete --ignore-not-found -k manifests/rbac/
	$(KUBECTL) delete --ignore-not-found -f manifests/namespace.yaml

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache

# Operator benchmark (bench/README.md, "Operators"): cbop against the raw API floor,
# controller-runtime and kopf on a fresh local control plane. Not part of `make test`.
# The full run takes 40-60 minutes and updates bench/results/ and bench/README.md.
BENCH_ARGS ?=
bench: venv binaries
	$(PY) -m bench.operators --update-readme $(BENCH_ARGS)

.PHONY: bench-quick
bench-quick: venv binaries
	$(PY) -m bench.operators --quick --out $${TMPDIR:-/tmp}/cbop-bench $(BENCH_ARGS)

# --- The container image and the local node (docs/deploy.md, docs/control-plane.md) ---
# WITH_NODE=1 on `make dev-cluster` / `make dev` adds a kubelet node with cbop:dev.
WITH_NODE ?=
# `make image`: podman builds the Dockerfile, tagged cbop:<version> and cbop:dev.
# BASE_IMAGE=local (default) builds on a Debian base made here without a registry;
# BASE_IMAGE=docker.io/library/python:3.11.14-slim-trixie uses the Dockerfile's default.
BASE_IMAGE ?= local
.PHONY: image node-binaries
image:
	@BASE_IMAGE='$(BASE_IMAGE)' hack/image/build.sh

# kubelet, kube-scheduler and containerd 2 for the local node (WITH_NODE=1).
node-binaries:
	@hack/build-node.sh >/dev/null
