# privq: one image for the API (`privq serve`), the worker (`privq worker`) and the
# one-shot migration (`privq migrate`). Two stages: dependencies are built into a
# virtualenv, and only that virtualenv is copied onto a clean slim base, run as a
# non-root user.

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/privq
WORKDIR /src

# Dependencies first (cached while only the code changes): install from the project
# metadata with a stub package, then the real package over it.
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py \
    && /opt/privq/bin/pip install . \
    && /opt/privq/bin/pip uninstall -y privq \
    && rm -rf app

COPY setup.py alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN /opt/privq/bin/pip install --no-deps . \
    # The runtime needs neither pip nor setuptools; byte-code is compiled once here.
    && /opt/privq/bin/pip uninstall -y pip setuptools wheel \
    && find /opt/privq -name '__pycache__' -prune -exec rm -rf {} + \
    && /opt/privq/bin/python -m compileall -q /opt/privq/lib


FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/privq/bin:$PATH \
    # Embedded default when run alone: SQLite in the data volume, one worker beside the API.
    PRIVQ_DATABASE_URL=sqlite:////srv/privq/data/privq.db

COPY --from=build /opt/privq /opt/privq
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin privq \
    && mkdir -p /srv/privq/data \
    && chown privq /srv/privq/data
WORKDIR /srv/privq
USER 10001

VOLUME ["/srv/privq/data"]
EXPOSE 8000

# Ready = the database answers and its schema is current (GET /readyz).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4).status != 200)"]

CMD ["privq", "serve", "--host", "0.0.0.0", "--port", "8000"]
