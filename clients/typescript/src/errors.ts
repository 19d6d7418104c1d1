// One class per error of the Python library (src/flexamem/errors.py), with the same names and the same
// family tree, so `catch (e) { if (e instanceof InvalidInputError) ... }` means what it means in Python.
// The server names the class in every error answer ({"error": {"type", "message"}}); the client throws
// that class with the server's message and the HTTP status. test/errors.test.ts holds the names equal to
// Python's `flexamem.errors.error_classes()`.

/** Base class of every error FlexA-Mem throws on purpose. */
export class FlexaMemError extends Error {
  /** The HTTP status of the answer that carried it (undefined when no server answered). */
  readonly status: number | undefined;
  /** The error type the server named (may be one this client has no class for, e.g. `InternalError`). */
  readonly type: string;

  constructor(message: string, options: { status?: number; type?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options.status;
    this.type = options.type ?? new.target.name;
  }
}

/** Data the library cannot store faithfully, or a malformed request (400, 413, 422). */
export class InvalidInputError extends FlexaMemError {}
/** No such history, unit or agent session for this key's tenant (404). */
export class NotFoundError extends InvalidInputError {}
/** A request id (Idempotency-Key) or step id already names another write (409): nothing stored. */
export class RequestConflictError extends InvalidInputError {}
/** A budget that is not a whole number from 1 to 100,000,000, or that leaves no room. */
export class BudgetError extends InvalidInputError {}
/** No API key, or a key no tenant holds (401). */
export class UnauthorizedError extends FlexaMemError {}
/** Too many failed authentications from this address: wait Retry-After (429). */
export class ThrottledError extends UnauthorizedError {}
/** A unit id written twice (409). */
export class DuplicateUnitError extends FlexaMemError {}
/** Something tried to change an immutable part of a note. */
export class WriteOnceError extends FlexaMemError {}
/** The store cannot be used: closed, read-only, corrupt, full, unreachable. */
export class StoreError extends FlexaMemError {}
/** The store (or the server) cannot be reached right now: nothing stored, retried (503). */
export class StoreUnavailableError extends StoreError {}
/** The disk is full: nothing stored; reads go on (507). */
export class StoreFullError extends StoreError {}
/** A stored row no longer matches its digest (500, naming the row). */
export class StoreCorruptError extends StoreError {}
/** Another writer advanced the history first (409): retried. */
export class ConcurrentWriteError extends StoreError {}
/** The history was deleted under an agent session: the session cannot continue. */
export class HistoryDroppedError extends ConcurrentWriteError {}
/** The store was closed. */
export class StoreClosedError extends StoreError {}
/** A write to a read-only store. */
export class ReadOnlyStoreError extends StoreError {}
/** The server has as many writes in progress as it admits (503 with Retry-After): retried. */
export class ServerBusyError extends FlexaMemError {}
/** A local model (tokenizer or embedding weights) is not installed on the server. */
export class ModelUnavailableError extends FlexaMemError {}
/** The server's embeddings endpoint failed for good: nothing was written with it. */
export class EmbeddingEndpointError extends ModelUnavailableError {}
/** A model call failed for good. */
export class LLMError extends FlexaMemError {}
/** The model answered, but not in the required form. */
export class LLMOutputError extends LLMError {}

export type ErrorClass = new (message: string, options?: { status?: number; type?: string; cause?: unknown }) =>
  FlexaMemError;

/** Every error class, by the name a server gives it. */
export const ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = Object.freeze(
  Object.fromEntries(
    [
      FlexaMemError, InvalidInputError, NotFoundError, RequestConflictError, BudgetError, UnauthorizedError,
      ThrottledError, DuplicateUnitError, WriteOnceError, StoreError, StoreUnavailableError, StoreFullError,
      StoreCorruptError, ConcurrentWriteError, HistoryDroppedError, StoreClosedError, ReadOnlyStoreError,
      ServerBusyError, ModelUnavailableError, EmbeddingEndpointError, LLMError, LLMOutputError,
    ].map((cls) => [cls.name, cls]),
  ),
);
