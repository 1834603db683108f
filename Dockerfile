# durable-responses: the Responses API server with its SQLite store on /data.
#
#   docker build -t durable-responses .
#   docker run -p 8000:8000 -v responses-data:/data durable-responses
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# README.md is part of the package metadata (pyproject `readme`), so the build needs it.
COPY pyproject.toml README.md ./
COPY server ./server
COPY recovery ./recovery
COPY store ./store
RUN pip install . \
    && rm -rf /app/build /app/*.egg-info

# Run as an unprivileged user that owns only the data directory.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin app \
    && mkdir -p /data \
    && chown app:app /data
USER app

VOLUME /data
EXPOSE 8000

# Graceful shutdown (durability.md G8): SIGTERM goes straight to the server,
# which is PID 1 because the entrypoint is in exec form. Give `docker stop` a
# timeout longer than the server's grace period.
STOPSIGNAL SIGTERM
ENTRYPOINT ["durable-responses"]
CMD ["--host", "0.0.0.0", "--port", "8000", "--db", "/data/responses.db"]
