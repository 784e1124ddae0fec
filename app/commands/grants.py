"""`privq grants list|create|set|revoke`: tenants' ρ limits on datasets."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from app.commands.output import Done, Listing, Record, action

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.api.schemas import GrantOut
    from app.db import Grant

# The service, the API's schemas and the database are imported inside each command, when
# it runs: `privq --help` and the parser must not pay for them (app/cli.py).

GRANT_COLUMNS = ("id", "tenant_id", "rho_limit_exact", "rho_spent_exact", "rho_remaining_exact")


def _out(session: Session, grant: Grant) -> GrantOut:
    from app.api.schemas import GrantOut
    from app.services import grants as grant_service

    spent = grant_service.spent_by_grant(session, [grant.id])[grant.id]
    return GrantOut.of(grant, spent_units=spent)


def list_grants(args: argparse.Namespace, session: Session) -> Listing:
    from app.api.schemas import GrantOut
    from app.services import datasets as dataset_service
    from app.services import grants as grant_service

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


def limit_units(args: argparse.Namespace) -> int:
    """The limit in ledger units: `rho`, or `--epsilon` with `--delta` converted as the
    HTTP API converts them (the largest ρ within ε at δ, δ at most PRIVQ_MAX_DELTA); both
    rounded down."""
    from app.config import get_settings
    from app.errors import InvalidRequest
    from app.services.rho import rho_units, rho_units_from_epsilon

    if (args.epsilon is None) != (args.delta is None):
        raise InvalidRequest("--epsilon and --delta go together: give both", field="epsilon")
    if args.rho is not None and args.epsilon is not None:
        raise InvalidRequest("give rho or --epsilon with --delta, not both", field="rho")
    if args.epsilon is not None:
        return rho_units_from_epsilon(
            args.epsilon,
            args.delta,
            field="--epsilon",
            delta_field="--delta",
            max_delta=get_settings().max_delta,
        )
    if args.rho is None:
        raise InvalidRequest("give rho, or --epsilon with --delta", field="rho")
    return rho_units(args.rho, rounding="down")


def create_grant(args: argparse.Namespace, session: Session) -> Record:
    from app.services import grants as grant_service

    grant = grant_service.create_grant(
        session,
        dataset_id=args.dataset_id,
        tenant_id=args.tenant_id,
        rho_units=limit_units(args),
    )
    return Record(_out(session, grant))


def set_grant(args: argparse.Namespace, session: Session) -> Record:
    from app.services import grants as grant_service

    grant = grant_service.set_limit(
        session,
        dataset_id=args.dataset_id,
        grant_id=args.grant_id,
        rho_units=limit_units(args),
    )
    return Record(_out(session, grant))


def revoke_grant(args: argparse.Namespace, session: Session) -> Done:
    from app.services import grants as grant_service

    grant_service.revoke(session, dataset_id=args.dataset_id, grant_id=args.grant_id)
    return Done(
        f"grant {args.grant_id} revoked: the tenant no longer sees the dataset; "
        "the ledger keeps its charges"
    )


def limit_arguments(parser: argparse.ArgumentParser, rho_help: str) -> None:
    """The limit: a ρ (positional), or `--epsilon E --delta D` instead."""
    parser.add_argument("rho", nargs="?", default=None, help=rho_help)
    parser.add_argument(
        "--epsilon", type=float, default=None, help="instead of rho: ε at --delta, converted to ρ"
    )
    parser.add_argument(
        "--delta",
        type=float,
        default=None,
        help="the δ of --epsilon (at most PRIVQ_MAX_DELTA, default 1e-3)",
    )


def register(commands: argparse._SubParsersAction[Any]) -> None:
    grants = commands.add_parser("grants", help="tenants' ρ limits on a dataset")
    actions = grants.add_subparsers(dest="grants_command", required=True)
    action(
        actions,
        "list",
        list_grants,
        "a dataset's grants: limit, spent, remaining",
        "dataset_id",
        paged=True,
    )
    create = action(
        actions,
        "create",
        create_grant,
        "give a tenant a ρ limit (or ε at δ) on a dataset",
        "dataset_id",
        "tenant_id",
    )
    limit_arguments(create, "the limit, e.g. 0.5 (rounded down to the ledger's 1e-12)")
    set_ = action(
        actions,
        "set",
        set_grant,
        "top up or lower a grant (never below spent)",
        "dataset_id",
        "grant_id",
    )
    limit_arguments(set_, "the new limit")
    action(
        actions,
        "revoke",
        revoke_grant,
        "take the dataset away from the tenant",
        "dataset_id",
        "grant_id",
    )
