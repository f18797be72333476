# hifi: one image for every daemon; the first argument picks it (deploy/container/entrypoint):
#   IMAGE connector --dest NAME | IMAGE retrier | IMAGE auditor | IMAGE ingest | IMAGE hifi-tenants diff ...
# Build: make image (docs/deploy-container.md). BASE: any image with Python 3.11+ and its venv
# module as `python3`: python:3.11-slim from a registry, or a Debian base made offline.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
WORKDIR /src
SHELL ["/bin/sh", "-eu", "-c"]
# The dependencies first, read from pyproject.toml alone: this layer is rebuilt only when it changes.
COPY pyproject.toml ./
RUN python3 -m venv /opt/hifi \
    && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && /opt/hifi/bin/pip install --no-cache-dir --requirement /tmp/requirements.txt
# The wheel is built from exactly these packages (tests/deploy/test_image.py builds the same and
# runs every console script it declares): no devstack, tests, bench or chaos.
COPY README.md ./
COPY hifi ./hifi
COPY config ./config
COPY tenants ./tenants
COPY connector ./connector
COPY auditor ./auditor
COPY retrier ./retrier
COPY spark_batch ./spark_batch
COPY ingest ./ingest
RUN /opt/hifi/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${BASE}
SHELL ["/bin/sh", "-eu", "-c"]
# A fixed non-root uid and gid (10001): numeric, so Kubernetes' runAsNonRoot can verify it and a
# host directory mounted on /var/lib/hifi can be given to it (chown 10001:10001).
RUN groupadd --gid 10001 hifi \
    && useradd --uid 10001 --gid hifi --no-create-home --home-dir /var/lib/hifi \
        --shell /usr/sbin/nologin hifi \
    && install -d -o hifi -g hifi -m 0700 /var/lib/hifi
# The dependencies' venv, then hifi's wheel installed into it (and nothing else of the source).
COPY --from=build /opt/hifi /opt/hifi
COPY --from=build /dist /tmp/dist
RUN /opt/hifi/bin/pip install --no-cache-dir --no-index --no-deps /tmp/dist/*.whl \
    && /opt/hifi/bin/pip check \
    && rm -rf /tmp/dist
COPY --chmod=0755 deploy/container/entrypoint /opt/hifi/bin/hifi-entrypoint
COPY --chmod=0755 deploy/container/healthcheck.py /opt/hifi/bin/hifi-healthcheck
# HIFI_STATE_DIR: where a destination with [lookups] keeps the snapshot of its tenant entries
# (docs/tenants.md); HIFI_ARCHIVE_DIR: the auditor's archive. Mount a volume on /var/lib/hifi.
# HIFI_METRICS_PORT is left unset: each daemon then listens on its own default port.
# HIFI_METRICS_HOST=0.0.0.0 is every interface of the container's own network; with --network host
# it would be the host's, so run there with -e HIFI_METRICS_HOST=127.0.0.1 (docs/deploy-container.md).
ENV PATH=/opt/hifi/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HIFI_CATALOG_DIR=/etc/hifi/destinations \
    HIFI_METRICS_HOST=0.0.0.0 \
    HIFI_STATE_DIR=/var/lib/hifi \
    HIFI_ARCHIVE_DIR=/var/lib/hifi/archive
USER 10001:10001
WORKDIR /var/lib/hifi
# The ops ports: connector 9400, retrier 9401, auditor 9402, ingest 9403 (/metrics, /healthz,
# /readyz); ingest's API: 8080.
EXPOSE 9400 9401 9402 9403 8080
# Readiness of whichever daemon runs, on the port it uses (--metrics-port, else
# HIFI_METRICS_PORT, else its default); kept by `podman build --format docker` and Docker.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/hifi/bin/hifi-healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/hifi/bin/hifi-entrypoint"]
CMD ["--help"]
