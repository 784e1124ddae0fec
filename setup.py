"""Which packages the distribution holds (everything else is in pyproject.toml).

Every package under app/, found, plus the Alembic scripts: the repository keeps them
at the top level (alembic/, beside alembic.ini), and the wheel carries them as
`app.migration_scripts`, where `app.migrations` finds them in an installed copy. The
client, `privq_client`, is a top-level package of its own with its `py.typed` marker
(its dependencies are the `client` extra). The dashboard's page, scripts, styles and
vendored Vega builds (app/api/dashboard) ship as package data.
"""

from setuptools import find_packages, setup

MIGRATIONS = {
    "app.migration_scripts": "alembic",
    "app.migration_scripts.versions": "alembic/versions",
}

setup(
    packages=[*find_packages(include=["app", "app.*", "privq_client"]), *MIGRATIONS],
    package_dir=MIGRATIONS,
    package_data={
        "app.migration_scripts": ["script.py.mako"],
        "privq_client": ["py.typed"],
        # The dashboard's page, script, styles and vendored Vega builds (GET /dashboard).
        "app.api.dashboard": ["*.html", "*.js", "*.css", "vendor/*"],
    },
)
