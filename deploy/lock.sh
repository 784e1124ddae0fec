#!/bin/sh
# Regenerates deploy/requirements.lock: every package the service needs (pyproject.toml's
# [project] dependencies, no extras), pinned with hashes, plus its build requirements
# ([build-system]: setuptools), which the image builds privq with (pip install --no-build-isolation). The Dockerfile installs
# exactly this file with --require-hashes.
#
# Then deploy/requirements-spark.lock: the same plus the `spark` extra (the Spark Connect
# client), which an image built for the spark engine (PRIVQ_RECORD_ENGINE=spark) installs
# on top. It starts from requirements.lock's pins, so the packages both name keep one
# version (tests/deploy checks that they agree).
#
# Run from the repository root after changing the dependencies in pyproject.toml, with
# the Python of the image (3.11 on Linux), e.g. inside the base image itself:
#   sh deploy/lock.sh
#   docker run --rm --network host -v "$PWD:/src" -w /src python:3.11-slim sh deploy/lock.sh
# To move every package to its newest release, delete the lock file first (pip-compile
# otherwise keeps the versions already pinned when they still satisfy pyproject.toml).
set -eu
cd "$(dirname "$0")/.."
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
# A clean resolution from the package index: no local pip configuration or wheel folder.
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_CONSTRAINT PIP_EXTRA_INDEX_URL 2>/dev/null || true
"$venv/bin/pip" install --quiet 'pip-tools>=7.4'
CUSTOM_COMPILE_COMMAND="sh deploy/lock.sh" "$venv/bin/pip-compile" --quiet --strip-extras --generate-hashes --allow-unsafe \
    --no-emit-index-url --no-emit-find-links \
    --output-file deploy/requirements.lock \
    --build-deps-for wheel \
    pyproject.toml
# The spark lock resolves from the service's pins: pip-compile keeps the versions its
# output file already names.
[ -f deploy/requirements-spark.lock ] || cp deploy/requirements.lock deploy/requirements-spark.lock
CUSTOM_COMPILE_COMMAND="sh deploy/lock.sh" "$venv/bin/pip-compile" --quiet --strip-extras --generate-hashes --allow-unsafe \
    --no-emit-index-url --no-emit-find-links \
    --extra spark \
    --output-file deploy/requirements-spark.lock \
    pyproject.toml
