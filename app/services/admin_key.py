"""The admin key: where it comes from, replacing it, and how it is shown the one time.

Two sources, one at a time:
- `PRIVQ_ADMIN_KEY` (the settings): privq stores nothing of it. Replacing it means
  setting the variable to a new value for every API and worker process and restarting
  them; `rotate` refuses (`AdminKeyFromSettings`) and says so.
- otherwise a generated key, whose SHA-256 is stored in `service_secrets` (the first
  API start makes one and prints it once). `rotate` replaces the stored hash with a new
  key's: the old key stops working in every API process within a few seconds (they
  re-read the hash: `app.api.deps.ADMIN_KEY_RECHECK_SECONDS`).

Rotation needs only the database, never the old key: whoever can reach the database
from the host (`PRIVQ_DATABASE_URL`) recovers a lost key with `privq admin rotate-key`.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.config import Settings
from app.db import ServiceSecret, utcnow
from app.errors import PrivqError
from app.services.keys import generate_key, hash_key
from app.services.tenants import ADMIN_KEY_PREFIX, ADMIN_KEY_SECRET_NAME

RULE = "=" * 72


class AdminKeyFromSettings(PrivqError, status=409, code="admin_key_from_settings"):
    """The admin key is PRIVQ_ADMIN_KEY: the database holds nothing to rotate."""


def rotate(session: Session, settings: Settings) -> str:
    """A new admin key; its hash replaces the stored one (or is stored, if none was).
    Returns the key, which is shown only now; never commits."""
    if settings.admin_key is not None:
        raise AdminKeyFromSettings(
            "the admin key comes from PRIVQ_ADMIN_KEY, which privq does not store: set it "
            "to a new value of at least 32 random characters (e.g. python3 -c 'import "
            "secrets; print(secrets.token_urlsafe(32))') for every API and worker process "
            "and restart them; the old key stops working once no process has it"
        )
    key = generate_key(ADMIN_KEY_PREFIX)
    secret = session.get(ServiceSecret, ADMIN_KEY_SECRET_NAME, with_for_update=True)
    if secret is None:
        session.add(ServiceSecret(name=ADMIN_KEY_SECRET_NAME, value_hash=hash_key(key)))
    else:
        secret.value_hash = hash_key(key)
        secret.created_at = utcnow()
    session.flush()
    return key


def notice(key: str, *, headline: str) -> str:
    """The key in a block of its own, apart from the log lines around it."""
    return "\n".join(
        (
            "",
            RULE,
            f"privq: {headline}",
            "privq: it is shown only now; only its hash is stored. Keep it in a secret store.",
            "",
            f"    {key}",
            "",
            "privq: lost or leaked? `privq admin rotate-key` on a host that reaches the",
            "privq: database replaces it (the old key stops working within seconds).",
            RULE,
            "",
        )
    )
