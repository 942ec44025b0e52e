# One image for Parley's processes: the worker, the gateway and the plans service
# (docker-compose.yml picks the command). They run as the unprivileged user parley
# (uid 10001, numeric in USER so Kubernetes' runAsNonRoot can verify it), whose only
# writable places are its home (git worktrees), /tmp (the worker's heartbeat file) and
# the data dir /var/lib/parley (payloads and plans when no volume or bucket is given).
FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md worker.py ./
COPY parley parley
COPY workflows workflows
COPY activities activities
COPY services services
RUN pip install --no-cache-dir . \
    && groupadd --system --gid 10001 parley \
    && useradd --system --uid 10001 --gid parley --create-home parley \
    && mkdir -p /var/lib/parley/payloads /var/lib/parley/plans \
    && chown -R parley:parley /var/lib/parley
USER 10001:10001
# SIGTERM stops each process gracefully: the gateway drains, the worker lets running
# activities finish (PARLEY_WORKER_GRACE_SECONDS).
STOPSIGNAL SIGTERM
ENTRYPOINT ["parley"]
