"""Exceptions raised by FlexA-Mem.

Every error the library raises on purpose derives from :class:`FlexaMemError`, so callers can catch
one type. Errors are raised *before* anything is written: a failed call leaves the store as it was.
"""

from __future__ import annotations


class FlexaMemError(Exception):
    """Base class of every error FlexA-Mem raises on purpose."""


class InvalidInputError(FlexaMemError, ValueError):
    """The caller passed data the library cannot store faithfully (empty text, bad bytes, ...)."""


class NotFoundError(InvalidInputError):
    """A server has no such history, unit or agent session for this key's tenant, or it was deleted
    (HTTP 404). An :class:`InvalidInputError`, as the same call on a local ``Memory`` raises."""


class RequestConflictError(InvalidInputError):
    """A request id (HTTP ``Idempotency-Key``) already names another write of this history: the same id
    with a different body is refused (HTTP 409), as payment APIs do; the same body again is a no-op that
    answers the first write's ids. Nothing of the refused write is stored."""


class UnauthorizedError(FlexaMemError):
    """No API key, or a key no tenant of the server holds (HTTP 401)."""


class ThrottledError(UnauthorizedError):
    """A server refuses this client's address for a while after too many failed authentications (HTTP
    429 with ``Retry-After``): nothing was done; a call with a right key goes through once it has passed."""


class DuplicateUnitError(FlexaMemError):
    """A unit id was written twice; notes are write-once."""


class WriteOnceError(FlexaMemError):
    """Something tried to change or delete raw text, a record or another immutable part of a note."""


class StoreError(FlexaMemError):
    """The store cannot be used: closed, read-only, corrupt, full, unreachable or of an unknown schema
    version. Every failure of the environment under the store arrives as one of these, naming its cause;
    a failed write leaves nothing of itself stored, and reads keep working."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached right now: a lost or restarting database connection, or a file locked
    by another writer past the busy timeout. Nothing of the call was stored; it can be tried again
    (HTTP 503 with ``Retry-After``)."""


class ServerBusyError(FlexaMemError):
    """A server has as many writes in progress as it admits (``flexamem serve --max-pending-writes``):
    nothing of this one was stored; it can be sent again (HTTP 503 with ``Retry-After``), so an
    admitted write's wait stays bounded instead of queueing without end."""


class StoreFullError(StoreError):
    """The disk (or the database's quota) is full: the write was not stored, and what was stored before
    is intact; reads and renders keep working (HTTP 507)."""


class StoreCorruptError(StoreError):
    """A stored row cannot be read, or does not match the digest written with it (a flipped byte, a
    change made past the write-once triggers). The error names the row; ``Memory.verify()`` lists them all."""


class ConcurrentWriteError(StoreError):
    """Another writer appended to the history first (its sequence number was taken). ``Memory`` catches
    up with the store and retries; it reaches callers only when retries run out."""


class HistoryDroppedError(ConcurrentWriteError):
    """The history this object was reading or writing was deleted (``Memory.drop``, ``DELETE``) or
    deleted and started again since it was read. A ``Memory`` view starts afresh as the (empty or new)
    history and retries its write, so callers see this only from an agent session, whose steps belonged
    to the deleted history: such a session cannot continue."""


class StoreClosedError(StoreError):
    """The store was closed and cannot be used any more."""


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only (or on a read-only file)."""


class ModelUnavailableError(FlexaMemError):
    """A local model (tokenizer or embedding weights) is not installed."""


class EmbeddingEndpointError(ModelUnavailableError):
    """An embeddings endpoint (``flexamem.write.remote_embed.EndpointEmbedder``) failed for good: retries
    spent, a refused request, an answer that is not the protocol's, vectors of the wrong size, or
    vectors that are not those of the model it was declared to serve. Nothing was written with them."""


class BudgetError(InvalidInputError):
    """The budget leaves no room: the fixed prompt alone reaches the ceiling ``floor(0.95 * B)``."""


class LLMError(FlexaMemError):
    """A model call failed for good: retries spent, a refused request (401, 400), or no endpoint."""


class LLMOutputError(LLMError):
    """The model answered, but not in the required form (strict JSON), even after one repair."""


def error_classes() -> dict[str, type[FlexaMemError]]:
    """Every error class of this module, by name: the names a server gives its error answers
    (``{"error": {"type": ...}}``) and the client raises back, one registry for both doors (a class
    added here needs no list kept by hand)."""
    found: dict[str, type[FlexaMemError]] = {}
    todo: list[type[FlexaMemError]] = [FlexaMemError]
    while todo:
        cls = todo.pop()
        if cls.__module__ == __name__:
            found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def error_name(exc: BaseException) -> str:
    """The name a server answers ``exc`` with: its class's, or that of its nearest base of this module
    (a subclass defined elsewhere), so that the client raises the same class, or the closest it has."""
    known = error_classes()
    for cls in type(exc).__mro__:
        if known.get(cls.__name__) is cls:
            return cls.__name__
    return FlexaMemError.__name__
