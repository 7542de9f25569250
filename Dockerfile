# syntax=docker/dockerfile:1
# The gpu-policy admission webhook. Build: docker build -t gpu-policy-webhook:0.1.0 .
# Runs as a non-root numeric user on a read-only root filesystem; the only writable path it
# needs is /tmp (an emptyDir in the Helm chart), where PROMETHEUS_MULTIPROC_DIR lives.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Stage 1: build wheels of the project and of every dependency, so the runtime stage needs
# no compiler, no network access to a source index, and no build tools.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook/ ./webhook/
RUN python -m pip wheel --wheel-dir /wheels .

# Stage 2: the runtime image, with only the installed wheels.
FROM ${PYTHON_IMAGE}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PROMETHEUS_MULTIPROC_DIR=/tmp/gpu-policy-metrics \
    GPU_POLICY_TLS_DIR=/etc/gpu-policy/tls \
    GPU_POLICY_BIND=0.0.0.0:8443
# Install the project's wheel; --no-index makes its dependencies come from the wheels built
# above too, nothing is fetched at this point. The wheels come in through a bind mount, so
# they take no space in the image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels /wheels/gpu_policy_webhook-*.whl \
    && mkdir -p /etc/gpu-policy/tls
# 65532: the conventional "nonroot" id of distroless images; numeric, so that Kubernetes can
# verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpu-policy", "serve"]
