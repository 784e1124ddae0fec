#!/bin/sh
# Regenerates deploy/spark/requirements.lock from deploy/spark/requirements.in: Apache
# Spark's Python package and what it needs, pinned with hashes. The Spark image
# (deploy/spark/Dockerfile) installs exactly this file with --require-hashes.
#
# Run from anywhere, with a Python 3.11 on Linux (the image's), e.g.
#   sh deploy/spark/lock.sh
# pyspark is published as a source package of ~0.5 GB: resolving it downloads it once.
set -eu
cd "$(dirname "$0")"
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
# A clean resolution from the package index: no local pip configuration or wheel folder.
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_CONSTRAINT PIP_EXTRA_INDEX_URL 2>/dev/null || true
"$venv/bin/pip" install --quiet 'pip-tools>=7.4'
CUSTOM_COMPILE_COMMAND="sh deploy/spark/lock.sh" "$venv/bin/pip-compile" --quiet --generate-hashes \
    --allow-unsafe --no-emit-index-url --no-emit-find-links \
    --output-file requirements.lock requirements.in
