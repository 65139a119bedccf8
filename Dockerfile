# The servectl controller image (docs/deploy.md, docs/images.md):
#
#   docker build -t servectl:0.1.0 .
#
# The core package only: no TensorFlow, no Locust (the `serving` extra stays out), so the
# image is the controller and the CLI. Debian bookworm's Python 3.11 in a virtualenv at
# /opt/servectl: the same base, Python and layout as scripts/build-images, which builds this
# image without Docker or a registry (a mmdebstrap rootfs, docs/images.md). It runs as
# uid/gid 65532, which the Helm chart's securityContext also names, with a read-only root
# filesystem: /tmp is the pod's emptyDir.
# tests/unit/test_deploy_chart.py checks the base, the user, the install and the entrypoint.
FROM debian:bookworm-slim

ENV PATH=/opt/servectl/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/servectl \
    && groupadd --system --gid 65532 servectl \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin servectl

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
