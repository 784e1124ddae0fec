"""Errors: one exception root for everything the service refuses, each with its HTTP status.

Raise a `PrivqError` subclass anywhere (services, API, worker); the API's one handler
(`app.api.errors`) renders it as `{"error": {"code": ..., "message": ..., **details}}`.
A subclass's docstring is its default message. Messages and details never carry raw
records.
"""

from __future__ import annotations

from typing import Any, ClassVar


class PrivqError(Exception):
    """The service could not complete the request."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"

    def __init_subclass__(
        cls, *, status: int | None = None, code: str | None = None, **kwargs: Any
    ) -> None:
        """`class Conflict(PrivqError, status=409, code="conflict")`: a subclass names its
        HTTP status and its code in its header; omitted, they are inherited."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class InvalidRequest(PrivqError, status=422, code="invalid_request"):
    """The request is not valid."""


class Unauthorized(PrivqError, status=401, code="unauthorized"):
    """A valid API key is required: send `Authorization: Bearer <key>`."""


class KeyRevoked(Unauthorized, code="key_revoked"):
    """This API key was revoked; ask the curator for a new one."""


class TenantDisabled(Unauthorized, code="tenant_disabled"):
    """This tenant is disabled: none of its keys is accepted until the curator enables it."""


class Forbidden(PrivqError, status=403, code="forbidden"):
    """This key may not perform this operation."""


class NotFound(PrivqError, status=404, code="not_found"):
    """Not found."""


class Conflict(PrivqError, status=409, code="conflict"):
    """The request conflicts with the current state."""


class AlreadyExists(Conflict, code="already_exists"):
    """An object with this name already exists."""


class InsufficientBudget(Conflict, code="insufficient_budget"):
    """The remaining privacy budget is smaller than the charge; nothing was charged."""


class RhoTotalExceeded(Conflict, code="rho_total_exceeded"):
    """The grants of this dataset together would exceed its rho_total."""


class BelowSpent(Conflict, code="rho_below_spent"):
    """A grant's limit cannot be lowered below what it has already spent."""


class GrantRevoked(Conflict, code="grant_revoked"):
    """This grant was revoked; grant the tenant the dataset again instead."""


class RecordsPurged(Conflict, code="records_purged"):
    """This dataset's raw records were destroyed: it can no longer be measured, only
    queried from its model."""


class DatasetNotReady(Conflict, code="dataset_not_ready"):
    """The dataset's registration has not finished, or was rejected: nothing to measure."""


class SourceChanged(Conflict, code="source_changed"):
    """A registered source's files differ from their fingerprint at registration: the
    dataset is frozen, so the access is refused (new data is a new dataset)."""


class SourceNotAllowed(PrivqError, status=422, code="source_not_allowed"):
    """A source URI outside the operator's allowed roots (PRIVQ_SOURCE_ROOTS), or escaping
    them by `..` or a link: refused before any file is read."""


class JobsPending(Conflict, code="jobs_pending"):
    """This dataset has jobs that have not finished; cancel them or wait for them first."""


class JobFinished(Conflict, code="job_finished"):
    """This job has already finished; there is nothing to cancel."""


class IdempotencyConflict(Conflict, code="idempotency_key_reused"):
    """This Idempotency-Key was already used for a different request."""


class PayloadTooLarge(PrivqError, status=413, code="payload_too_large"):
    """The upload is larger than the server accepts."""


class ServiceUnavailable(PrivqError, status=503, code="unavailable"):
    """The service cannot reach its database."""


class InvariantViolated(PrivqError, status=500, code="invariant_violated"):
    """An internal check that guards the privacy budget failed; nothing was released."""


class LedgerInvariantViolated(InvariantViolated, code="ledger_invariant_violated"):
    """The ledger is not in the state the service relies on; nothing was changed."""
