# privq: one image for the API (`privq serve`), the worker (`privq worker`) and the
# one-shot migration (`privq migrate`).
#
# Stages: `deps` installs the locked dependencies (deploy/requirements.lock, hashes
# checked) into a virtualenv; `app` builds privq itself on top; the runtime stage copies
# the dependencies and privq as two layers onto a clean base, run as a non-root user. The
# dependency layers depend on the lock file alone: a change to the code, README.md or
# the docs rebuilds only the small privq layer (seconds), not the dependencies.
#
# The base image is pinned by digest (the tag is only for people). To move it, read the
# multi-platform digest of the new tag and pass it here or change the default:
#   docker buildx imagetools inspect python:3.11-slim-bookworm
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest> .
# (docker-compose.yml passes PRIVQ_PYTHON_IMAGE through; deploy/compose.standin.yml
# builds on a local stand-in where no registry is reachable.)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS deps

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# Exactly the locked versions, every file checked against its hash; `pip check` refuses
# a lock that does not hold together. Regenerate the lock with `sh deploy/lock.sh`.
COPY deploy/requirements.lock /tmp/requirements.lock
RUN python -m venv /opt/privq \
    && /opt/privq/bin/pip install --require-hashes -r /tmp/requirements.lock \
    && /opt/privq/bin/pip check

# An image for the spark engine carries the Spark Connect client too: the `spark` extra,
# locked with the same pins in deploy/requirements-spark.lock. docker-compose.yml passes
# its PRIVQ_RECORD_ENGINE here; an image for the local engine (the default) skips it.
ARG PRIVQ_RECORD_ENGINE=local
COPY deploy/requirements-spark.lock /tmp/requirements-spark.lock
RUN if [ "$PRIVQ_RECORD_ENGINE" = spark ]; then \
        /opt/privq/bin/pip install --require-hashes -r /tmp/requirements-spark.lock \
        && /opt/privq/bin/pip check; \
    fi


# privq itself, built with the locked setuptools (no build isolation: nothing is fetched).
# pyproject.toml names README.md as the package's long description, so it is copied
# here, after the dependencies, where a change to it costs only this layer. `pip check`
# fails the build when pyproject.toml asks for a package the lock lacks (run
# `sh deploy/lock.sh`).
FROM deps AS app
WORKDIR /src
COPY pyproject.toml setup.py README.md alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN /opt/privq/bin/pip install --no-deps --no-build-isolation . \
    && /opt/privq/bin/pip check \
    && site=$(/opt/privq/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
    && mkdir -p /stage/site-packages /stage/bin \
    && mv "$site/app" "$site"/privq-*.dist-info /stage/site-packages/ \
    && mv /opt/privq/bin/privq /stage/bin/


# The dependencies as the runtime gets them: without pip and setuptools, compiled once.
FROM deps AS runtime-deps
RUN /opt/privq/bin/pip uninstall -y pip setuptools wheel \
    && find /opt/privq -name '__pycache__' -prune -exec rm -rf {} + \
    && /opt/privq/bin/python -m compileall -q /opt/privq/lib


FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/privq/bin:$PATH \
    # Embedded default when run alone: SQLite under /srv/privq/data, one worker beside
    # the API. Mount a volume there to keep it (`docker run -v privq-data:/srv/privq/data`);
    # the image declares none, so no anonymous volume is left behind per container.
    PRIVQ_DATABASE_URL=sqlite:////srv/privq/data/privq.db

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin privq \
    && mkdir -p /srv/privq/data \
    && chown privq /srv/privq/data

# Two layers: the dependencies (change with the lock only), then privq (every release).
COPY --from=runtime-deps /opt/privq /opt/privq
COPY --from=app /stage/site-packages/ /opt/privq/lib/python3.11/site-packages/
COPY --from=app /stage/bin/privq /opt/privq/bin/privq
COPY deploy/healthcheck.py /opt/privq/healthcheck.py

WORKDIR /srv/privq
USER 10001
EXPOSE 8000

# One check for every role, read from the container's command (deploy/healthcheck.py):
# `privq serve` is healthy when GET /readyz answers 200 (database reachable, schema
# current); `privq worker --metrics-port N` when its metrics server answers; a worker
# without one, or `privq migrate`, while it runs.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/opt/privq/healthcheck.py"]

CMD ["privq", "serve", "--host", "0.0.0.0", "--port", "8000"]
