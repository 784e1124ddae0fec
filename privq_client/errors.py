"""The client's exceptions: one root, and one class for every refusal of the service.

- `ApiError` — the service answered with an error status. It carries the contract's
  `code` (`insufficient_budget`, `not_found`, `invalid_request`, …), its `message`,
  the HTTP `status` and every other field of the error body in `details` (e.g.
  `rho_remaining` of `insufficient_budget`).
- `TransportError` — no usable answer: the service could not be reached, the
  connection broke, a timeout passed, or a stream ended early.
- `JobFailed` — a job that `Job.wait()` waited for ended `failed` or `cancelled`.
- `JobTimeout` — `Job.wait()` gave up; the job itself goes on.

All of them derive from `PrivqClientError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privq_client.jobs import Job


class PrivqClientError(Exception):
    """Anything the privq client raises about the service."""


class ApiError(PrivqClientError):
    """The service refused a request: `{"error": {"code", "message", ...}}` with its status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        method: str | None = None,
        url: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.method = method
        self.url = url
        super().__init__(str(self))

    @property
    def rho_remaining(self) -> float | None:
        """ρ left on the grant, as `insufficient_budget` reports it (else None)."""
        value = self.details.get("rho_remaining")
        return float(value) if isinstance(value, int | float) else None

    def __str__(self) -> str:
        where = f"{self.method} {self.url} → " if self.method and self.url else ""
        extra = ", ".join(
            f"{key}={value!r}"
            for key, value in self.details.items()
            if not isinstance(value, list | dict)
        )
        return f"{where}{self.status} {self.code}: {self.message}" + (
            f" ({extra})" if extra else ""
        )

    def __repr__(self) -> str:
        return f"ApiError(status={self.status}, code={self.code!r}, message={self.message!r})"


class TransportError(PrivqClientError):
    """The request got no usable answer (connection refused or broken, timeout, cut stream)."""

    def __init__(self, message: str, *, method: str | None = None, url: str | None = None) -> None:
        self.method = method
        self.url = url
        prefix = f"{method} {url}: " if method and url else ""
        super().__init__(prefix + message)


class JobFailed(PrivqClientError):
    """The job ended `failed` or `cancelled`; `job` holds its last state and `error`."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.status = job.status
        reason = job.error or "no reason given"
        super().__init__(f"job {job.id} {job.status}: {reason}")


class JobTimeout(PrivqClientError, TimeoutError):
    """`Job.wait()` stopped waiting; the job keeps running on the service."""

    def __init__(self, job: Job, timeout: float) -> None:
        self.job = job
        self.timeout = timeout
        super().__init__(
            f"job {job.id} still {job.status} after {timeout:g} s "
            "(it goes on running; wait again, or cancel it with job.cancel())"
        )
