"""API keys per tenant, hashed at rest.

A key is ``fm_`` plus 32 random bytes (URL-safe base64); only its SHA-256 is stored, in a JSON file
``{"tenants": {"<tenant>": ["<sha256 hex>", ...]}}`` (mode 0600). Keys are random, so a plain hash is
enough (nothing to brute-force); lookups compare hashes in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from pathlib import Path

from flexamem.errors import InvalidInputError

TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyFile:
    """The tenants' key hashes, read from ``path`` (re-read when the file changes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: float | None = None
        self._by_hash: dict[str, str] = {}

    def _load(self) -> dict[str, list[str]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            tenants = data["tenants"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(f"cannot read the key file {self.path}: {exc}") from None
        return {str(t): [str(h) for h in hs] for t, hs in tenants.items()}

    def _refresh(self) -> None:
        stamp = self.path.stat().st_mtime if self.path.exists() else None
        if stamp != self._stamp:
            self._by_hash = {h: t for t, hs in self._load().items() for h in hs}
            self._stamp = stamp

    def tenants(self) -> list[str]:
        self._refresh()
        return sorted(set(self._by_hash.values()))

    def tenant_of(self, key: str | None) -> str | None:
        """The tenant holding ``key``, or None."""
        if not key:
            return None
        self._refresh()
        digest = key_hash(key)
        found = None
        for h, tenant in self._by_hash.items():  # constant time per stored hash
            if hmac.compare_digest(h, digest):
                found = tenant
        return found

    def add_key(self, tenant: str) -> str:
        """A new key for ``tenant`` (created if new); only its hash is written. Returns the key."""
        if not TENANT.match(tenant):
            raise InvalidInputError(
                "a tenant name is 1-64 letters, digits, '_' or '-', starting with a letter or digit"
            )
        tenants = self._load()
        key = "fm_" + secrets.token_urlsafe(32)
        tenants.setdefault(tenant, []).append(key_hash(key))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"tenants": tenants}, f, indent=2)
        os.replace(tmp, self.path)
        return key
