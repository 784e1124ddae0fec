"""Budget and ledger: what a grant allows, has spent and has left; every ledger entry.

A tenant reads its own grant. The admin reads any grant by naming `tenant_id`, and
the whole ledger of a dataset.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BeforeValidator
from sqlalchemy.orm import Session

from app.api.concurrency import read_endpoint
from app.api.deps import PrincipalDep, SettingsDep
from app.api.pagination import PAGED, PageDep
from app.api.schemas import (
    NO_SUCH_DATASET,
    BudgetOut,
    LedgerEntryOut,
    PrivacyUnitOut,
    error_responses,
)
from app.api.types import DELTA, MAX_DELTA_NOTE, ResourceId
from app.errors import InvalidRequest
from app.privacy.accounting import epsilon_from_rho
from app.services import datasets as dataset_service
from app.services import ledger, unit_accounting
from app.services.rho import check_delta, units_to_decimal_str, units_to_rho

router = APIRouter(prefix="/v1/datasets/{dataset_id}", tags=["budget"])

DEFAULT_DELTA = 1e-6
# Each conversion takes about a millisecond and budgets are read far more often than
# they change: remembered.
_epsilon = lru_cache(maxsize=4096)(epsilon_from_rho)


@router.get(
    "/budget",
    response_model=BudgetOut,
    responses=error_responses({404: NO_SUCH_DATASET}),
)
@read_endpoint
def read_budget(
    dataset_id: ResourceId,
    session: Session,
    principal: PrincipalDep,
    settings: SettingsDep,
    delta: Annotated[
        float,
        DELTA.field(f"δ for the (ε, δ) report. {MAX_DELTA_NOTE}"),
        BeforeValidator(DELTA.check_text),
        Query(),
    ] = DEFAULT_DELTA,
    tenant_id: Annotated[
        ResourceId | None, Query(description="Admin only: whose grant to read.")
    ] = None,
) -> BudgetOut:
    """ρ limit, spent and remaining, and ε at `delta` (tight Canonne–Kamath–Steinke conversion),
    per privacy unit of the dataset (`privacy_unit`; null: per row)."""
    delta = check_delta(delta, max_delta=settings.max_delta)
    if principal.tenant is not None:
        if tenant_id is not None and tenant_id != principal.tenant.id:
            raise InvalidRequest("tenant_id may only be given with the admin key")
        tenant_id = principal.tenant.id
    elif tenant_id is None:
        raise InvalidRequest("with the admin key, name the grant's tenant: ?tenant_id=…")
    grant_budget = ledger.budget(session, tenant_id=tenant_id, dataset_id=dataset_id)
    spent, limit = grant_budget.spent_units, grant_budget.limit_units
    return BudgetOut(
        dataset_id=dataset_id,
        tenant_id=tenant_id,
        rho_limit=units_to_rho(limit),
        rho_spent=units_to_rho(spent),
        rho_remaining=units_to_rho(grant_budget.remaining_units),
        epsilon=_epsilon(units_to_rho(spent), delta),
        epsilon_limit=_epsilon(units_to_rho(limit), delta),
        delta=delta,
        rho_limit_exact=units_to_decimal_str(limit),
        rho_spent_exact=units_to_decimal_str(spent),
        rho_remaining_exact=units_to_decimal_str(grant_budget.remaining_units),
        privacy_unit=PrivacyUnitOut.of(unit_accounting.described_of(session, dataset_id)),
    )


@router.get(
    "/ledger",
    response_model=list[LedgerEntryOut],
    responses={**PAGED, **error_responses({404: NO_SUCH_DATASET})},
)
@read_endpoint(on_loop=False)
def read_ledger(
    dataset_id: ResourceId,
    session: Session,
    principal: PrincipalDep,
    page: PageDep,
) -> list[LedgerEntryOut]:
    """Every charge and refund, oldest first: all for the admin, a tenant's own otherwise."""
    tenant_id = principal.tenant_id
    dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
    found = ledger.entries(
        session,
        dataset_id=dataset_id,
        tenant_id=tenant_id,
        limit=page.limit,
        cursor=page.cursor,
    )
    page.link_next(found.next_cursor)
    return [LedgerEntryOut.of(entry) for entry in found.items]
