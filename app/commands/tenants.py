"""`privq tenants list|create|show` and `privq keys …`: the people who spend budget."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from app.api.schemas import TenantCreated, TenantOut
from app.commands.output import Listing, Record, json_flag, page_flags, run
from app.services import tenants as tenant_service

TENANT_COLUMNS = ("id", "name", "key_prefix", "created_at")


def list_tenants(args: argparse.Namespace, session: Session) -> Listing:
    found = tenant_service.list_tenants(session, limit=args.limit, cursor=args.cursor)
    return Listing([TenantOut.of(t) for t in found.items], TENANT_COLUMNS, found.next_cursor)


def create_tenant(args: argparse.Namespace, session: Session) -> Record:
    tenant, api_key = tenant_service.create_tenant(session, name=args.name)
    return Record(
        TenantCreated(**TenantOut.of(tenant).model_dump(), api_key=api_key),
        note="the key is shown only now; only its hash is stored",
    )


def show_tenant(args: argparse.Namespace, session: Session) -> Record:
    return Record(TenantOut.of(tenant_service.get_tenant(session, args.tenant_id)))


def register(commands: argparse._SubParsersAction[Any]) -> None:
    tenants = commands.add_parser("tenants", help="list, create and inspect tenants")
    actions = tenants.add_subparsers(dest="tenants_command", required=True)

    listing = actions.add_parser("list", help="every tenant, oldest first")
    page_flags(listing)
    json_flag(listing)
    listing.set_defaults(handler=partial(run, list_tenants))

    create = actions.add_parser("create", help="create a tenant; prints its API key once")
    create.add_argument("name")
    json_flag(create)
    create.set_defaults(handler=partial(run, create_tenant))

    show = actions.add_parser("show", help="a tenant, its keys and its grants")
    show.add_argument("tenant_id")
    json_flag(show)
    show.set_defaults(handler=partial(run, show_tenant))
