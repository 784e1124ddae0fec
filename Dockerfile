# privq: one image for the API (`privq serve`) and the worker (`privq worker`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/privq

# Dependencies first (cached while only the code changes): install from the
# project metadata with a stub package, then the real package over it.
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py && pip install . && pip uninstall -y privq && rm -rf app

COPY setup.py alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN pip install --no-deps . && useradd --system --uid 10001 --home-dir /srv/privq privq \
    && mkdir -p /srv/privq/data && chown privq /srv/privq/data
USER privq

# Embedded default when run alone: SQLite in the data volume, one in-process worker.
ENV PRIVQ_DATABASE_URL=sqlite:////srv/privq/data/privq.db
VOLUME ["/srv/privq/data"]
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"

CMD ["privq", "serve", "--host", "0.0.0.0", "--port", "8000"]
