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

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class InvalidRequest(PrivqError):
    """The request is not valid."""

    status = 422
    code = "invalid_request"


class Unauthorized(PrivqError):
    """A valid API key is required: send `Authorization: Bearer <key>`."""

    status = 401
    code = "unauthorized"


class KeyRevoked(Unauthorized):
    """This API key was revoked; ask the curator for a new one."""

    code = "key_revoked"


class TenantDisabled(Unauthorized):
    """This tenant is disabled: none of its keys is accepted until the curator enables it."""

    code = "tenant_disabled"


class Forbidden(PrivqError):
    """This key may not perform this operation."""

    status = 403
    code = "forbidden"


class NotFound(PrivqError):
    """Not found."""

    status = 404
    code = "not_found"


class Conflict(PrivqError):
    """The request conflicts with the current state."""

    status = 409
    code = "conflict"


class AlreadyExists(Conflict):
    """An object with this name already exists."""

    code = "already_exists"


class InsufficientBudget(Conflict):
    """The remaining privacy budget is smaller than the charge; nothing was charged."""

    code = "insufficient_budget"


class RhoTotalExceeded(Conflict):
    """The grants of this dataset together would exceed its rho_total."""

    code = "rho_total_exceeded"


class BelowSpent(Conflict):
    """A grant's limit cannot be lowered below what it has already spent."""

    code = "rho_below_spent"


class GrantRevoked(Conflict):
    """This grant was revoked; grant the tenant the dataset again instead."""

    code = "grant_revoked"


class RecordsPurged(Conflict):
    """This dataset's raw records were destroyed: it can no longer be measured, only
    queried from its model."""

    code = "records_purged"


class JobsPending(Conflict):
    """This dataset has jobs that have not finished; cancel them or wait for them first."""

    code = "jobs_pending"


class JobFinished(Conflict):
    """This job has already finished; there is nothing to cancel."""

    code = "job_finished"


class IdempotencyConflict(Conflict):
    """This Idempotency-Key was already used for a different request."""

    code = "idempotency_key_reused"


class PayloadTooLarge(PrivqError):
    """The upload is larger than the server accepts."""

    status = 413
    code = "payload_too_large"


class ServiceUnavailable(PrivqError):
    """The service cannot reach its database."""

    status = 503
    code = "unavailable"


class InvariantViolated(PrivqError):
    """An internal check that guards the privacy budget failed; nothing was released."""

    status = 500
    code = "invariant_violated"


class LedgerInvariantViolated(InvariantViolated):
    """The ledger is not in the state the service relies on; nothing was changed."""

    code = "ledger_invariant_violated"
