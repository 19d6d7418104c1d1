// The wire under a Memory: one request with bounded retries, over one of several servers. The retry rule
// is the Python client's (src/flexamem/client/http.py, `Transport.plan`): a connection failure or timeout,
// a busy or unreachable store or server (503 StoreUnavailableError, ServerBusyError), a lost race (409
// ConcurrentWriteError) and a proxy's 502/504 are tried again with exponential back-off and jitter
// (honouring Retry-After) until `retrySeconds` have passed; a connection failure or a 502 moves on to the
// next URL. Every write carries what makes a retry harmless (an Idempotency-Key, a step id, a session id),
// made once per call, so a write retried after the server stored it is stored once. Any other error
// answer is thrown at once as the class the server named.
import {
  ConcurrentWriteError,
  ERROR_CLASSES,
  type ErrorClass,
  FlexaMemError,
  InvalidInputError,
  NotFoundError,
  ServerBusyError,
  StoreError,
  StoreFullError,
  StoreUnavailableError,
  ThrottledError,
  UnauthorizedError,
} from "./errors.js";
import type { Routes } from "./openapi.js";

/** How a Memory talks to its server(s); seconds, as the Python `ClientSettings`. */
export interface ClientSettings {
  /** Seconds one attempt may take, connecting and reading the answer included (60). */
  timeout?: number;
  /** How long a call keeps retrying a retryable failure before it throws (30; 0: never retries). */
  retrySeconds?: number;
  /** The first wait between attempts, doubled each time with jitter (0.1). */
  backoff?: number;
  /** The longest wait between two attempts; a longer Retry-After is cut to it (2). */
  maxBackoff?: number;
}

const DEFAULTS: Required<ClientSettings> = { timeout: 60, retrySeconds: 30, backoff: 0.1, maxBackoff: 2 };
const RETRIED: ReadonlySet<ErrorClass> = new Set([StoreUnavailableError, ServerBusyError, ConcurrentWriteError]);
const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: InvalidInputError,
  401: UnauthorizedError,
  404: NotFoundError,
  409: ConcurrentWriteError,
  413: InvalidInputError,
  422: InvalidInputError,
  429: ThrottledError,
  503: StoreUnavailableError,
  507: StoreFullError,
};

type Route = keyof Routes;

/** One request and how to read its answer; `headers` (a write's Idempotency-Key) are made once per call,
 * so every retry sends the same. */
export interface Call<R extends Route, T> {
  route: R;
  path: Routes[R]["path"];
  query?: Routes[R]["query"];
  headers?: Routes[R]["headers"];
  body?: Routes[R]["body"];
  read: (answer: Routes[R]["answer"]) => T;
  /** The answer to a 404 (a drop of nothing: false); without it a 404 throws NotFoundError. */
  missing?: () => T;
  /** The answer is text (a download), not JSON. */
  text?: boolean;
  signal?: AbortSignal | undefined;
}

export class Transport {
  readonly urls: readonly string[];
  readonly settings: Required<ClientSettings>;
  /** The server calls go to: the next one after a connection failure. */
  current = 0;
  /** Attempts made after a retryable failure, over this transport's life. */
  retries = 0;
  readonly #key: string;

  constructor(urls: readonly string[], key: string, settings: ClientSettings = {}) {
    const given = Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined));
    const merged: Required<ClientSettings> = { ...DEFAULTS, ...given };
    for (const [name, value] of Object.entries(merged)) {
      const ok = typeof value === "number" && Number.isFinite(value) && (name === "retrySeconds" ? value >= 0 : value > 0);
      if (!ok) throw new InvalidInputError(`${name} must be a positive number of seconds, got ${String(value)}`);
    }
    this.urls = urls;
    this.settings = merged;
    this.#key = key;
  }

  async run<R extends Route, T>(call: Call<R, T>): Promise<T> {
    const started = performance.now();
    const [method, template] = call.route.split(" ") as [string, string];
    const path = template.replace(/\{(\w+)\}/g, (_, name: string) =>
      encodeURIComponent(String((call.path as Record<string, unknown>)[name])),
    );
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined && value !== null) query.set(name, String(value));
    }
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#key}`, "User-Agent": "flexamem-ts" };
    for (const [name, value] of Object.entries(call.headers ?? {})) {
      if (typeof value === "string") headers[name] = value;
    }
    let body: string | undefined;
    if (call.body !== undefined) {
      body = JSON.stringify(call.body);
      headers["Content-Type"] = "application/json";
    }
    const suffix = path + (query.toString() ? `?${query}` : "");
    for (let attempt = 0; ; attempt++) {
      const url = this.urls[this.current % this.urls.length] + suffix;
      const outcome = await this.#attempt(url, { method, headers, body }, call.signal);
      if (!("failure" in outcome)) {
        if (outcome.status < 400) {
          return call.read((call.text ? outcome.text : JSON.parse(outcome.text || "null")) as Routes[R]["answer"]);
        }
        if (outcome.status === 404 && call.missing) return call.missing();
      }
      const { failure, wait } = this.#plan(outcome, url);
      const { backoff, maxBackoff, retrySeconds } = this.settings;
      let delay = Math.min(maxBackoff, backoff * 2 ** attempt) * (0.5 + Math.random() / 2);
      if (wait !== undefined) delay = Math.min(maxBackoff, Math.max(delay, wait));
      if ((performance.now() - started) / 1000 + delay > retrySeconds) throw failure;
      this.retries++;
      await sleep(delay * 1000, call.signal);
    }
  }

  /** One attempt: the answer's status and text, or why none came (the caller's abort is thrown). */
  async #attempt(url: string, init: RequestInit, signal: AbortSignal | undefined): Promise<Outcome> {
    const timeout = AbortSignal.timeout(this.settings.timeout * 1000);
    try {
      const response = await fetch(url, { ...init, signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
      const text = await response.text(); // under the same deadline: a body cut short is a failed attempt
      return { status: response.status, text, retryAfter: response.headers.get("retry-after") };
    } catch (error) {
      if (signal?.aborted) throw signal.reason; // the caller's abort: never retried
      return { failure: new StoreUnavailableError(`cannot reach the FlexA-Mem server (${describe(error)})`, { cause: error }) };
    }
  }

  /** A failed attempt: the error to throw if no retry is left, and a wait the server asked for; throws
   * at once what is not worth another attempt. */
  #plan(outcome: Outcome, url: string): { failure: FlexaMemError; wait?: number } {
    if ("failure" in outcome) {
      this.current++; // this server is unreachable or cut the connection: the next one
      return { failure: outcome.failure };
    }
    const failure = errorFrom(outcome.status, outcome.text, new URL(url).host);
    const cls = failure.constructor as ErrorClass;
    const proxy = (outcome.status === 502 || outcome.status === 504) && cls === StoreError;
    if (!RETRIED.has(cls) && !proxy) throw failure;
    if (outcome.status === 502) this.current++;
    const seconds = Number(outcome.retryAfter?.trim() || Number.NaN);
    return Number.isFinite(seconds) ? { failure, wait: Math.max(0, seconds) } : { failure };
  }
}

type Outcome = { status: number; text: string; retryAfter: string | null } | { failure: FlexaMemError };

/** The library's error for an error answer: the class the server named (else the one for the status),
 * with the server's message. */
export function errorFrom(status: number, text: string, host: string): FlexaMemError {
  let type = "";
  let message = text.slice(0, 500);
  try {
    const error = (JSON.parse(text) as { error?: { type?: unknown; message?: unknown } }).error;
    if (error && typeof error.type === "string" && typeof error.message === "string") {
      type = error.type;
      message = error.message;
    }
  } catch {
    // not a FlexA-Mem answer (a proxy's page): its text, and the class for the status
  }
  const cls = ERROR_CLASSES[type] ?? BY_STATUS[status] ?? StoreError;
  return new cls(`${message || `HTTP ${status}`} (HTTP ${status} from ${host})`, { status, type: type || cls.name });
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${(error.cause as Error & { code?: string }).code ?? error.cause.message}` : "";
  return `${error.name}: ${error.message}${cause}`;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = () => {
      signal?.removeEventListener("abort", aborted);
      resolve();
    };
    const aborted = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", aborted, { once: true });
  });
}
