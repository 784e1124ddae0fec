"""`privq tenants list|create|show|disable|enable` and `privq keys list|add|revoke`."""

from __future__ import annotations

import argparse
from functools import partial
from typing import TYPE_CHECKING, Any

from app.commands.output import Done, Listing, Record, action

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# The service, the API's schemas and the database are imported inside each command, when
# it runs: `privq --help` and the parser must not pay for them (app/cli.py).

TENANT_COLUMNS = ("id", "name", "disabled", "created_at")
KEY_COLUMNS = ("id", "key_prefix", "active", "created_at", "last_used_at", "revoked_at")


def list_tenants(args: argparse.Namespace, session: Session) -> Listing:
    from app.api.schemas import TenantOut
    from app.services import tenants as tenant_service

    found = tenant_service.list_tenants(session, limit=args.limit, cursor=args.cursor)
    return Listing([TenantOut.of(t) for t in found.items], TENANT_COLUMNS, found.next_cursor)


def create_tenant(args: argparse.Namespace, session: Session) -> Record:
    from app.api.schemas import TenantCreated, TenantOut
    from app.services import tenants as tenant_service

    tenant, key, api_key = tenant_service.create_tenant(session, name=args.name)
    return Record(
        TenantCreated(
            **TenantOut.of(tenant).model_dump(),
            api_key=api_key,
            key_id=key.id,
            key_prefix=key.key_prefix,
        ),
        note="the key is shown only now; only its hash is stored",
    )


def show_tenant(args: argparse.Namespace, session: Session) -> Record:
    from app.api.routers.tenants import tenant_detail

    return Record(tenant_detail(session, args.tenant_id))


def set_disabled(disabled: bool, args: argparse.Namespace, session: Session) -> Record:
    from app.api.routers.tenants import tenant_detail
    from app.services import tenants as tenant_service

    tenant_service.set_disabled(session, args.tenant_id, disabled=disabled)
    return Record(tenant_detail(session, args.tenant_id))


def list_keys(args: argparse.Namespace, session: Session) -> Listing:
    from app.api.schemas import ApiKeyOut
    from app.services import keys as key_service
    from app.services import tenants as tenant_service

    tenant_service.get_tenant(session, args.tenant_id)
    rows = [ApiKeyOut.of(key) for key in key_service.keys_of(session, args.tenant_id)]
    return Listing(rows, KEY_COLUMNS)


def add_key(args: argparse.Namespace, session: Session) -> Record:
    from app.api.schemas import ApiKeyCreated
    from app.services import keys as key_service
    from app.services import tenants as tenant_service

    tenant = tenant_service.get_tenant(session, args.tenant_id)
    key, api_key = key_service.issue(session, tenant)
    return Record(
        ApiKeyCreated(
            id=key.id, key_prefix=key.key_prefix, api_key=api_key, created_at=key.created_at
        ),
        note="the key is shown only now; the tenant's other keys keep working until revoked",
    )


def revoke_key(args: argparse.Namespace, session: Session) -> Done:
    from app.services import keys as key_service
    from app.services import tenants as tenant_service

    tenant_service.get_tenant(session, args.tenant_id)
    key_service.revoke(session, tenant_id=args.tenant_id, key_id=args.key_id)
    return Done(f"key {args.key_id} revoked: refused from its next request on")


def register(commands: argparse._SubParsersAction[Any]) -> None:
    tenants = commands.add_parser("tenants", help="list, create and inspect tenants")
    actions = tenants.add_subparsers(dest="tenants_command", required=True)
    action(actions, "list", list_tenants, "every tenant, oldest first", paged=True)
    action(actions, "create", create_tenant, "create a tenant; prints its API key once", "name")
    action(actions, "show", show_tenant, "a tenant, its keys and its grants", "tenant_id")
    action(
        actions,
        "disable",
        partial(set_disabled, True),
        "refuse every key of the tenant until it is enabled",
        "tenant_id",
    )
    action(
        actions,
        "enable",
        partial(set_disabled, False),
        "accept the tenant's keys again",
        "tenant_id",
    )

    keys = commands.add_parser("keys", help="a tenant's API keys: list, add, revoke")
    key_actions = keys.add_subparsers(dest="keys_command", required=True)
    action(key_actions, "list", list_keys, "every key of a tenant (never the key)", "tenant_id")
    action(key_actions, "add", add_key, "one more key (rotation: add, switch, revoke)", "tenant_id")
    action(
        key_actions,
        "revoke",
        revoke_key,
        "refuse a key from its next request on",
        "tenant_id",
        "key_id",
    )
