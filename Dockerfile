# The servectl controller image (docs/deploy.md):
#
#   docker build -t servectl:0.1.0 .
#
# The core package only: no TensorFlow, no Locust (the `serving` extra stays out), so the
# image is the controller and the CLI. It runs as uid/gid 65532, which the Helm chart's
# securityContext also names, with a read-only root filesystem: /tmp is the pod's emptyDir.
# tests/unit/test_deploy_chart.py checks the base, the user, the install and the entrypoint.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp

RUN groupadd --system --gid 65532 servectl \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin servectl

# Only what the package build reads, so that an edit elsewhere in the repository does not
# invalidate the install layer.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY servectl ./servectl
RUN pip install --no-cache-dir . \
    && rm -rf /src

WORKDIR /
USER 65532:65532
# /metrics and /healthz, /readyz (the chart's ports.metrics and ports.probe).
EXPOSE 8080 8081
ENTRYPOINT ["servectl", "controller", "--kubernetes"]
