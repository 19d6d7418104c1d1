"""API keys per tenant, hashed at rest.

A key is ``fm_`` plus 32 random bytes (URL-safe base64); only its SHA-256 is stored, in a JSON file
``{"tenants": {"<tenant>": ["<sha256 hex>", ...]}, "link_secret": "..."}`` (mode 0600). Keys are random,
so a plain hash is enough (nothing to brute-force); lookups compare hashes in constant time. The link
secret signs the inspector's short-lived links, so no long-lived key ever travels in a URL; a link names its
tenant, history, expiry and the query, budget and mode it shows, and opens nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexamem.errors import InvalidInputError

TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Link:
    """What a genuine inspector link names (``KeyFile.read_link``): whose history, until when, showing what."""

    tenant: str
    history: str
    expires: int
    view: str
    """:func:`link_view` of the query, budget and mode the link was made for: it opens that rendering only."""

    @property
    def expired(self) -> bool:
        return self.expires < time.time()


def link_view(query: str, budget: int, mode: str) -> str:
    """The rendering an inspector link opens, as a short digest of every parameter the page is drawn
    with: a link serves the query, budget and mode it was made for, and no other."""
    return hashlib.sha256(json.dumps([query, budget, mode]).encode("utf-8")).hexdigest()[:32]


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyFile:
    """The tenants' key hashes, read from ``path`` (re-read when the file changes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: float | None = None
        self._by_hash: dict[str, str] = {}
        self._secret = ""

    def _data(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"tenants": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data["tenants"], dict):
                raise TypeError("'tenants' is not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(f"cannot read the key file {self.path}: {exc}") from None
        return dict(data)

    def _load(self) -> dict[str, list[str]]:
        return {str(t): [str(h) for h in hs] for t, hs in self._data()["tenants"].items()}

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Read-modify-write of the file by one process at a time (workers start together)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _refresh(self) -> None:
        try:  # one stat per request (it runs on the event loop): the file missing is no key at all
            stamp: float | None = self.path.stat().st_mtime
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            data = self._data()
            self._by_hash = {str(h): str(t) for t, hs in data["tenants"].items() for h in hs}
            self._secret = str(data.get("link_secret") or "")
            self._stamp = stamp

    def link_secret(self) -> bytes:
        """The secret that signs the inspector's short-lived links: random, kept in the key file (so
        every worker and every server sharing the file checks the same links), made on first use."""
        self._refresh()
        if not self._secret:
            with self._locked():
                data = self._data()
                if not data.get("link_secret"):
                    data["link_secret"] = secrets.token_urlsafe(32)
                    self._save(data)
            self._stamp = None
            self._refresh()
        return self._secret.encode("utf-8")

    def head_secret(self) -> bytes:
        """The secret that signs the heads the store writes (``Memory(head_key=)``): derived from the
        key file's secret, so it lives outside the database like the keys themselves."""
        return hmac.new(self.link_secret(), b"flexamem heads", hashlib.sha256).digest()

    def sign_link(self, tenant: str, history: str, seconds: int, view: str) -> tuple[str, int]:
        """A token that lets a browser open the inspector on ``tenant``'s ``history`` for ``seconds``, showing
        only ``view`` (:func:`link_view` of the query, budget and mode it was made for): ``(token, expiry as
        a Unix time)``. Signed, not stored; revoked with the secret."""
        expires = int(time.time()) + seconds
        payload = json.dumps([tenant, history, expires, view]).encode()
        encoded = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return f"{encoded}.{self._mac(encoded)}", expires

    def read_link(self, token: str) -> Link | None:
        """What a link token names, when its signature is genuine (expired or not); None for a forged,
        damaged or older-format token."""
        payload, _, mac = token.partition(".")
        if not payload or not hmac.compare_digest(mac, self._mac(payload)):
            return None
        try:
            tenant, history, expires, view = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (ValueError, TypeError):
            return None
        if not all(isinstance(x, str) for x in (tenant, history, view)) or not isinstance(expires, int):
            return None
        return Link(tenant, history, expires, view)

    def _mac(self, payload: str) -> str:
        return hmac.new(self.link_secret(), payload.encode("utf-8"), hashlib.sha256).hexdigest()

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
        key = "fm_" + secrets.token_urlsafe(32)
        with self._locked():
            data = self._data()
            data["tenants"].setdefault(tenant, []).append(key_hash(key))
            self._save(data)
        return key


class AuthThrottle:
    """Failed authentications per client address, as a token bucket: an address may fail ``burst`` times at
    once, then ``rate`` times a second; an address with no token left is refused (429) before its key is
    even read, good or bad, until a token is back. Only failures take tokens (a wrong key, a forged or
    expired link; not a missing key). One per worker process, in memory: with N workers an address gets up
    to N x ``burst`` failures at once and N x ``rate`` a second (docs/RELIABILITY.md). ``burst`` 0: off."""

    MAX_ADDRESSES = 100_000  # the buckets kept; the least recently failed dropped first (memory stays bounded)

    def __init__(self, burst: int, rate: float) -> None:
        if burst < 0 or (burst > 0 and rate <= 0):
            raise InvalidInputError("the failed-authentication limit needs burst >= 0 and, when on, rate > 0")
        self.burst, self.rate = burst, rate
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, when)
        self._lock = threading.Lock()

    def _tokens(self, address: str, now: float) -> float:
        tokens, when = self._buckets.get(address, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - when) * self.rate)

    def wait(self, address: str) -> float:
        """Seconds until ``address`` may try a key again: 0 when it may now."""
        if not self.burst:
            return 0.0
        with self._lock:
            if address not in self._buckets:
                return 0.0
            tokens = self._tokens(address, time.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def failed(self, address: str) -> None:
        """One failed authentication from ``address``: one token taken."""
        if not self.burst:
            return
        with self._lock:
            now = time.monotonic()
            self._buckets[address] = (max(self._tokens(address, now) - 1, 0.0), now)
            self._buckets.move_to_end(address)
            while len(self._buckets) > self.MAX_ADDRESSES:
                self._buckets.popitem(last=False)
