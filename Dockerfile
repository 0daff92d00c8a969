# Kioku: one image for every `kioku` command (`run`, `migrate`, `doctor`, `backup`, ...).
#
#   docker build -t kioku .
#   docker run --rm -e DISCORD_TOKEN=... -v kioku-data:/data kioku          # embedded PostgreSQL in /data
#   docker run --rm --env-file .env kioku doctor
#
# Production uses docker-compose.yml (PostgreSQL 16 in its own container).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# A fixed, unprivileged user. The embedded PostgreSQL refuses to run as root, and the
# bot needs no privilege; the uid is fixed so volumes keep a stable owner across rebuilds.
RUN groupadd --system --gid 10001 kioku \
    && useradd --system --uid 10001 --gid kioku --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin kioku

WORKDIR /app

# The package (a plain, non-editable install into site-packages). README.md is the
# project's readme in pyproject.toml, so the build needs it.
COPY pyproject.toml README.md ./
COPY bot ./bot
RUN pip install --no-cache-dir . \
    && rm -rf /app/bot /app/build /app/*.egg-info

# What a site-packages install does not carry: the Alembic scripts (found through
# KIOKU_MIGRATIONS_DIR) and the configuration (config/kioku.toml, config/persona.md,
# resolved from the working directory /app).
COPY migrations ./migrations
COPY config ./config
COPY alembic.ini ./

# /data holds the embedded PostgreSQL (when DATABASE_URL is unset) and the spool. It is
# created owned by kioku before VOLUME so a fresh named volume inherits that owner.
RUN mkdir -p /data && chown kioku:kioku /data

ENV KIOKU_DATA_DIR=/data \
    KIOKU_MIGRATIONS_DIR=/app/migrations \
    KIOKU_CONFIG=/app/config/kioku.toml

VOLUME ["/data"]

USER kioku

# No HEALTHCHECK: the bot serves no port by default (/metrics and /healthz only once
# KIOKU_METRICS__PORT is set), and `kioku doctor` calls the LLM endpoint, which is too
# costly to run every few seconds. docker-compose.yml sets the port and checks /healthz;
# `docker compose run --rm bot doctor` checks the rest on demand.
ENTRYPOINT ["kioku"]
CMD ["run"]
