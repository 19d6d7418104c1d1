"""What a route takes from the request besides its body: the tenant its API key (or inspector link)
names, the history's and agent session's names, a page of notes, the write's ``Idempotency-Key``."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request

from flexamem.errors import UnauthorizedError
from flexamem.server.errors import Refusal
from flexamem.server.keys import AuthThrottle, KeyFile
from flexamem.server.schemas import HISTORY, SESSION

HistoryName = Annotated[str, Path(pattern=HISTORY, description="the history's name (letters, digits, '.', '_', '-')")]
SessionName = Annotated[str, Path(pattern=SESSION, description="the agent session's id")]


async def tenant(request: Request) -> str:
    """The tenant whose key the request carries (401 otherwise; 429 first when the caller's address has
    failed to authenticate too often: its key is then not even read)."""
    keys: KeyFile = request.app.state.keys
    throttle: AuthThrottle = request.app.state.throttle
    address = request.client.host if request.client else ""
    wait = throttle.wait(address)
    if wait > 0:
        seconds = math.ceil(wait)
        raise Refusal(
            429,
            "ThrottledError",
            f"too many failed authentications from this address: every request that needs a key is refused "
            f"for {seconds} s",
            {"Retry-After": str(seconds)},
        )
    auth = request.headers.get("authorization", "")
    key = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key")
    if key is None and request.url.path.startswith("/inspect/"):
        if "key" in request.query_params:
            raise UnauthorizedError(
                "the inspector takes no API key in the URL (browsers, proxies and shell history keep it): send "
                "it as a header, or get a short-lived link from POST /v1/histories/{history}/inspect-link"
            )
        token = request.query_params.get("token")
        link = keys.read_link(token) if token else None
        if link is None and token:
            throttle.failed(address)  # a forged or damaged token
        if link is None or link.expired or link.tenant not in keys.tenants():
            raise UnauthorizedError(
                "an API key header, or an inspector link that is genuine and not expired, is required"
            )
        if link.history != request.path_params.get("history"):
            raise Refusal(403, "Forbidden", "this inspector link was made for another history: it opens only its own")
        request.state.link = link
        found: str | None = link.tenant
    else:
        found = keys.tenant_of(key)
        if found is None:
            if key:
                throttle.failed(address)
            raise UnauthorizedError("a valid API key is required (Authorization: Bearer <key> or X-API-Key)")
    request.state.tenant = found
    return str(found)


Tenant = Annotated[str, Depends(tenant)]
Start = Annotated[int, Query(ge=0, description="the first note's position")]
Limit = Annotated[int | None, Query(ge=1, le=10000, description="at most this many notes")]
RequestId = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="the caller's id of this write: a retry with the same key and body stores nothing more and "
        "gets the first answer; the same key with another body is refused (409 RequestConflictError), nothing "
        "stored (the Python client sends one with every write)",
    ),
]
