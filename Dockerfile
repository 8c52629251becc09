# cbop's container image: cbop and its dependencies installed into a virtualenv in one
# stage, copied onto a clean Python in the next, run as a numeric non-root user, with
# no pip, setuptools or compiler in the final image. `make image` builds it with podman
# (hack/image/build.sh); see docs/deploy.md.
#
# BASE_IMAGE is the official pinned Python image. Where no registry is reachable (cbop's
# CI), `make image` passes a local Debian bookworm base made by hack/image/base.sh
# instead (--build-arg BASE_IMAGE=localhost/cbop-base:...). Any base with python3 (3.11+)
# and its venv module works: both stages must use the same one.
ARG BASE_IMAGE=docker.io/library/python:3.11.14-slim-trixie

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The dependencies (kubernetes, prometheus-client, structlog, ...) come from the package
# index within the ranges pyproject.toml allows. A build behind a TLS-inspecting proxy
# passes its CA bundle as the build secret `ca-bundle` (used for this step only, never
# stored in a layer). pip and setuptools leave the virtualenv afterwards.
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /opt/cbop \
    && /opt/cbop/bin/pip install . \
    && /opt/cbop/bin/pip uninstall --yes pip setuptools

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/cbop/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The official image's system Python carries pip, setuptools and wheel; cbop needs none.
RUN if python3 -m pip --version >/dev/null 2>&1; then \
      python3 -m pip uninstall --yes --no-cache-dir pip setuptools wheel; \
    fi
COPY --from=builder /opt/cbop /opt/cbop
# 65532 is the conventional "nonroot" uid/gid; numeric so that Kubernetes can verify
# runAsNonRoot without an /etc/passwd entry.
USER 65532:65532
EXPOSE 8080 8081
# VERSION is src/cbop/__init__.py's (hack/image/build.sh passes hack/version.py's).
ARG VERSION=unknown
LABEL org.opencontainers.image.title="cbop" \
      org.opencontainers.image.description="The ConfigBundle operator: keeps a managed ConfigMap equal to its ConfigBundle." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["cbop"]
