# One image for Parley's processes: the worker, the gateway and the plans service
# (docker-compose.yml picks the command).
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
    && useradd --system --create-home parley \
    && mkdir -p /var/lib/parley/payloads /var/lib/parley/plans \
    && chown -R parley /var/lib/parley
USER parley
ENTRYPOINT ["parley"]
