"""`privq grants list|create|set|revoke`: tenants' ρ limits on datasets."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from app.api.schemas import GrantOut
from app.commands.output import Done, Listing, Record, json_flag, page_flags, run
from app.db import Grant
from app.services import grants as grant_service
from app.services.rho import rho_units

GRANT_COLUMNS = ("id", "tenant_id", "rho_limit_exact", "rho_spent_exact", "rho_remaining_exact")


def _out(session: Session, grant: Grant) -> GrantOut:
    spent = grant_service.spent_by_grant(session, [grant.id])[grant.id]
    return GrantOut.of(grant, spent_units=spent)


def list_grants(args: argparse.Namespace, session: Session) -> Listing:
    from app.services import datasets as dataset_service

    dataset_service.get_dataset(session, args.dataset_id)
    found = grant_service.list_grants(
        session, dataset_id=args.dataset_id, limit=args.limit, cursor=args.cursor
    )
    spent = grant_service.spent_by_grant(session, (g.id for g in found.items))
    return Listing(
        [GrantOut.of(g, spent_units=spent[g.id]) for g in found.items],
        GRANT_COLUMNS,
        found.next_cursor,
    )


def create_grant(args: argparse.Namespace, session: Session) -> Record:
    grant = grant_service.create_grant(
        session, dataset_id=args.dataset_id, tenant_id=args.tenant_id, rho_units=rho_units(args.rho)
    )
    return Record(_out(session, grant))


def set_grant(args: argparse.Namespace, session: Session) -> Record:
    grant = grant_service.set_limit(
        session, dataset_id=args.dataset_id, grant_id=args.grant_id, rho_units=rho_units(args.rho)
    )
    return Record(_out(session, grant))


def revoke_grant(args: argparse.Namespace, session: Session) -> Done:
    grant_service.revoke(session, dataset_id=args.dataset_id, grant_id=args.grant_id)
    return Done(
        f"grant {args.grant_id} revoked: the tenant no longer sees the dataset; "
        "the ledger keeps its charges"
    )


def register(commands: argparse._SubParsersAction[Any]) -> None:
    grants = commands.add_parser("grants", help="tenants' ρ limits on a dataset")
    actions = grants.add_subparsers(dest="grants_command", required=True)

    listing = actions.add_parser("list", help="a dataset's grants: limit, spent, remaining")
    listing.add_argument("dataset_id")
    page_flags(listing)
    json_flag(listing)
    listing.set_defaults(handler=partial(run, list_grants))

    create = actions.add_parser("create", help="give a tenant a ρ limit on a dataset")
    create.add_argument("dataset_id")
    create.add_argument("tenant_id")
    create.add_argument("rho", help="the limit, e.g. 0.5 (at most 12 decimal places)")
    json_flag(create)
    create.set_defaults(handler=partial(run, create_grant))

    update = actions.add_parser("set", help="top up or lower a grant (never below spent)")
    update.add_argument("dataset_id")
    update.add_argument("grant_id")
    update.add_argument("rho", help="the new limit")
    json_flag(update)
    update.set_defaults(handler=partial(run, set_grant))

    revoke = actions.add_parser("revoke", help="take the dataset away from the tenant")
    revoke.add_argument("dataset_id")
    revoke.add_argument("grant_id")
    json_flag(revoke)
    revoke.set_defaults(handler=partial(run, revoke_grant))
