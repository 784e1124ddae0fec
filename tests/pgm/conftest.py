"""Numerical tests run with one BLAS thread, as privq's processes do (app/cli.py).

Many small dense operations (L-BFGS-B's updates in the CGM E-step above all) were 18×
slower with BLAS threads spinning on a busy 2-core host. The environment variables that
the CLI sets only act before numpy is loaded, so the limit is applied at run time here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="package")
def _one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1, user_api="blas"):
        yield
