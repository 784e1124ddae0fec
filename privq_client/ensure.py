"""Get-or-create for the curator's setup, so that a script or notebook can run again.

`AdminClient.ensure_tenant`, `ensure_dataset` and `ensure_grant` find what a name (or a
dataset and a tenant) already names and return it; only what is missing is created.
They look things up by listing, so between the look-up and the creation another client
may create the same tenant: then the service's 409 is answered by looking again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from privq_client.errors import ApiError
from privq_client.transport import Json

if TYPE_CHECKING:
    from privq_client.admin import AdminClient


class AmbiguousName(ValueError):
    """Several datasets bear the name: the caller must choose one by id."""


def _tenant_named(admin: AdminClient, name: str) -> Json | None:
    return next((t for t in admin.tenants() if t.get("name") == name), None)


def ensure_tenant(admin: AdminClient, name: str, *, new_key: bool) -> Json:
    found = _tenant_named(admin, name)
    if found is None:
        try:
            created = admin.create_tenant(name)
        except ApiError as error:
            if error.status != 409:
                raise
            found = _tenant_named(admin, name)  # created meanwhile by someone else
            if found is None:
                raise
        else:
            return {**created, "created": True}
    tenant: Json = {**found, "api_key": None, "created": False}
    if new_key:
        key = admin.add_key(str(found["id"]))
        tenant["api_key"] = key["api_key"]
        tenant["key_id"] = key.get("id")
    return tenant


def dataset_named(admin: AdminClient, name: str) -> Json | None:
    """The one dataset called `name`, None if none; `AmbiguousName` if several are."""
    matches = [d for d in admin.datasets() if d.get("name") == name]
    if len(matches) > 1:
        ids = ", ".join(str(d["id"]) for d in matches)
        raise AmbiguousName(
            f"{len(matches)} datasets are called {name!r} ({ids}): choose one by id, or "
            "delete the extra ones"
        )
    return matches[0] if matches else None


def ensure_dataset(admin: AdminClient, name: str, upload: Any) -> Json:
    found = dataset_named(admin, name)
    if found is not None:
        return {**found, "created": False}
    created: Json = upload()
    return {**created, "created": True}


def ensure_grant(admin: AdminClient, dataset_id: str, tenant_id: str, amount: Json) -> Json:
    current = next(
        (
            g
            for g in admin.grants(dataset_id)
            if g.get("tenant_id") == tenant_id and g.get("revoked_at") is None
        ),
        None,
    )
    if current is None:
        created = admin.grant(dataset_id, tenant_id, **amount)
        return {**created, "created": True}
    if "rho" in amount and amount["rho"] == current.get("rho_limit"):
        return {**current, "created": False}
    changed = admin.set_grant(dataset_id, str(current["id"]), **amount)
    return {**changed, "created": False}
