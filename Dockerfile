# cbop's container image: a wheel built in one stage, installed into a clean slim
# Python in the next, run as a numeric non-root user. There is no Docker engine in
# cbop's CI: hack/check-image-install.sh (make image-check) runs the same build and
# install steps in a fresh virtualenv instead. See docs/deploy.md.
# Both stages use the same pinned base; written out (not an ARG) so that hadolint can
# check it. Bump both together.
FROM python:3.11.14-slim-trixie AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11.14-slim-trixie
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=builder /wheels /wheels
# The wheel's dependencies (kubernetes, prometheus-client, structlog, ...) come from
# the package index within the ranges pyproject.toml allows.
RUN pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels
# 65532 is the conventional "nonroot" uid/gid; numeric so that Kubernetes can verify
# runAsNonRoot without an /etc/passwd entry.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["cbop"]
