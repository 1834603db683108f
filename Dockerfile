# durable-responses: the Responses API server, with its SQLite store on the /data volume.
#
#   docker build -t durable-responses .
#   docker run -p 8000:8000 -v responses-data:/data \
#       -e DURABLE_RESPONSES_API_KEYS=team:sk-change-me durable-responses
#
# The container refuses to start without API keys; set DURABLE_RESPONSES_REQUIRE_KEYS=false
# to run it open on purpose.
#
# It runs as uid:gid 10001:10001. A named volume on /data is given to that user; a host
# folder bind-mounted there must be writable by it (`sudo chown 10001:10001 ./data`), or
# run the container as the folder's owner (`docker run --user "$(id -u):$(id -g)"`).
#
# Your own agent: put its module in a folder mounted on /agents (read-only is enough) and
# set DURABLE_RESPONSES_AGENT=my_agent:agent, or build an image FROM this one that copies
# it to /agents. /metrics is served without a key on port 9100: publish that port only
# to your Prometheus (e.g. -p 127.0.0.1:9100:9100), never next to the API.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, pinned, in their own layer: code changes do not reinstall them.
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock

# README.md is part of the package metadata (pyproject `readme`), so the build needs it.
COPY pyproject.toml README.md ./
COPY server ./server
COPY recovery ./recovery
COPY store ./store
RUN pip install --no-deps . \
    && rm -rf /app/build /app/*.egg-info

# Run as an unprivileged user that owns only the data directory; agents are read-only.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin app \
    && mkdir -p /data /agents \
    && chown app:app /data
USER 10001:10001

ENV DURABLE_RESPONSES_HOST=0.0.0.0 \
    DURABLE_RESPONSES_PORT=8000 \
    DURABLE_RESPONSES_METRICS_PORT=9100 \
    DURABLE_RESPONSES_DB=/data/responses.db \
    DURABLE_RESPONSES_AGENT_PATH=/agents \
    DURABLE_RESPONSES_REQUIRE_KEYS=true \
    DURABLE_RESPONSES_LOG_FORMAT=json

VOLUME /data
EXPOSE 8000 9100

# /healthz needs no API key; the slim image has no curl, so Python asks.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('DURABLE_RESPONSES_PORT', '8000')}/healthz\", timeout=2)"]

# Graceful shutdown (G8 in docs/guarantees.md): SIGTERM goes straight to the server, which is
# PID 1 because the entry point is in exec form. Open requests get the shutdown grace, then
# running turns get it again, then tool bodies still running are waited for up to their
# timeout: give `docker stop --time` more than twice DURABLE_RESPONSES_SHUTDOWN_GRACE plus
# the longest tool timeout plus 10 s (30 s with the defaults and no tools).
STOPSIGNAL SIGTERM
ENTRYPOINT ["durable-responses"]
