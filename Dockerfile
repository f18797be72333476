# hifi: one image for the connector (default) and the retrier (--entrypoint retrier).
FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/hifi
COPY pyproject.toml README.md ./
COPY config ./config
COPY connector ./connector
COPY retrier ./retrier
COPY spark_batch ./spark_batch
COPY hifi ./hifi
COPY tenants ./tenants
RUN /opt/hifi/bin/pip install --no-cache-dir .

FROM python:3.11-slim
RUN groupadd --system hifi && useradd --system --gid hifi --no-create-home hifi \
    && install -d -o hifi -g hifi -m 0700 /var/lib/hifi
COPY --from=build /opt/hifi /opt/hifi
# HIFI_STATE_DIR: where a destination with [lookups] keeps the snapshot of its tenant entries
# (mount a volume there so a restart while Redis is down is ready from it; docs/tenants.md).
ENV PATH=/opt/hifi/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HIFI_CATALOG_DIR=/etc/hifi/destinations \
    HIFI_METRICS_HOST=0.0.0.0 \
    HIFI_STATE_DIR=/var/lib/hifi
USER hifi
EXPOSE 9400
# The ops port listens on every interface of the container (probes and scrapers come from
# outside it); readiness: config loaded, partitions assigned, and tenant entries loaded.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9400/readyz', timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["connector"]
CMD ["--help"]
