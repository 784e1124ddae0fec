"""The ρ a schema's draft spent on private bins, charged to the dataset it creates.

A schema drafted with `--private-bins RHO` (`app.schema.private_bins`) records the ρ
its draft spent on the curator's table. The draft ran on the curator's machine, so the
schema is the record; when a dataset is uploaded or registered with it, that ρ is
written in the same transaction as the dataset, as a ledger line of the curator's:

- the curator is one tenant, `CURATOR_TENANT` (created disabled, without keys: it never
  signs in and its grants are never spent by a request);
- on the new dataset it holds a grant of exactly RHO, fully spent by one charge whose
  description says what it paid for.

The dataset's grants are capped together by `rho_total` (`app.services.grants`), so
tenants can then be granted at most `rho_total − RHO`; revoking the curator's grant
keeps its spending counted (what a revoked grant spent stays spent). An upload whose
RHO exceeds its `rho_total` is refused (422) before anything is stored. A dataset
without `rho_total` has no cap to charge against, but the line is written all the
same: the ledger shows every ρ spent on the dataset's records.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import Dataset, Grant, Tenant, utcnow
from app.errors import InvalidRequest
from app.schema import DatasetSchema
from app.services import ledger
from app.services.rho import rho_units_ceil, units_to_decimal_str

CURATOR_TENANT = "curator (private bins)"


def private_bins_units(schema: DatasetSchema, rho_total_units: int | None) -> int | None:
    """The ρ units the schema's draft spent (rounded up), None without private bins;
    422 if they exceed the dataset's `rho_total`. Call before storing anything."""
    if schema.private_bins is None:
        return None
    units = rho_units_ceil(schema.private_bins.rho, field="private_bins.rho")
    if rho_total_units is not None and units > rho_total_units:
        raise InvalidRequest(
            f"invalid schema: its private bins spent rho={units_to_decimal_str(units)}, "
            f"more than the dataset's rho_total={units_to_decimal_str(rho_total_units)}",
            field="schema",
        )
    return units


def curator_tenant(session: Session) -> Tenant:
    """The curator's tenant (created disabled on first use)."""
    found = session.scalars(select(Tenant).where(Tenant.name == CURATOR_TENANT)).one_or_none()
    if found is not None:
        return found
    try:
        with session.begin_nested():
            tenant = Tenant(name=CURATOR_TENANT, disabled_at=utcnow())
            session.add(tenant)
        return tenant
    except IntegrityError:  # another upload created it first
        return session.scalars(select(Tenant).where(Tenant.name == CURATOR_TENANT)).one()


def charge_private_bins(session: Session, dataset: Dataset, schema: DatasetSchema) -> None:
    """Write the curator's grant and ledger line for the schema's private bins (if any)
    on the dataset just added; never commits."""
    units = private_bins_units(schema, dataset.rho_total_units)
    if units is None or schema.private_bins is None:
        return
    curator = curator_tenant(session)
    session.add(Grant(tenant_id=curator.id, dataset_id=dataset.id, rho_limit_units=units))
    session.flush()
    names = ", ".join(schema.private_bins.attributes) or "its numeric attributes"
    ledger.charge(
        session,
        tenant_id=curator.id,
        dataset_id=dataset.id,
        rho_units=units,
        description=f"private bins: the schema's draft released the edges of {names}",
    )
