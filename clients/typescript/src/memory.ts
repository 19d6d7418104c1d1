// `Memory` at a URL: the Python library's remote Memory (src/flexamem/client/remote.py) for TypeScript.
// Each method is one call (notes: one per page) through the Transport, named by its route in `Routes`,
// so what is sent and read is checked by tsc against docs/openapi.json. Answers keep the server's field
// names, which are the Python objects' (a Rendering's `pass_through`, a Hit's `unit_id`); methods and
// options are camelCase. Everything is computed on the server: the client counts no tokens.
import { InvalidInputError } from "./errors.js";
import { type ClientSettings, Transport } from "./http.js";
import type {
  AgentOut, ErasureOut, HeadOut, HistoryOut, HitOut, NoteFull, RenderOut, SessionIn, Turn as WireTurn,
} from "./openapi.js";

export type Turn = WireTurn;
/** A chat message in OpenAI's format: `{ role, content }`, assistant `tool_calls`, `tool` replies. */
export type ChatMessage = Record<string, unknown>;
/** One session of a batch: `{ turns, session_id?, date? }`, as the server takes it. */
export type Session = SessionIn;
export type Rendering = RenderOut;
export type Hit = HitOut;
export type Note = NoteFull;
export type Head = HeadOut;
export type Erasure = ErasureOut;
export type HistoryInfo = HistoryOut;
export type Mode = "auto" | "pieces" | "units";

/** The next model call's messages, as the Python `AgentContext` (without the rendering object). */
export interface AgentContext {
  messages: ChatMessage[];
  tokens: number;
  ceiling: number;
  pass_through: boolean;
  cut: boolean;
  notes: number;
}

export interface MemoryOptions extends ClientSettings {
  /** The API key (default: env FLEXAMEM_API_KEY). */
  key?: string;
  /** The history of the key's tenant this object reads and writes ("default"). */
  history?: string;
  /** A profile name sent with every render (default: the server's). */
  profile?: string;
}

/** Per call: an AbortSignal ends the call (and its retries) at once. */
export interface CallOptions {
  signal?: AbortSignal;
}

export interface WriteOptions extends CallOptions {
  sessionId?: string;
  date?: string;
  /** The write's Idempotency-Key (default: a new UUID per call): the same id again stores nothing. */
  requestId?: string;
}

const KEY_ENV = "FLEXAMEM_API_KEY";
const NOTES_PAGE = 500;
const newId = (): string => crypto.randomUUID().replaceAll("-", "");

function written(requestId: string | undefined): { "Idempotency-Key": string } {
  if (requestId === undefined) return { "Idempotency-Key": newId() };
  if (typeof requestId !== "string" || !requestId.trim() || requestId.length > 200) {
    throw new InvalidInputError(`requestId must be a non-empty string of at most 200 characters, got ${JSON.stringify(requestId)}`);
  }
  return { "Idempotency-Key": requestId.trim() };
}

export class Memory {
  readonly history: string;
  readonly urls: readonly string[];
  readonly profile: string | undefined;
  readonly http: Transport;

  /** `url`: a server, or several servers of one store (an array, or comma-separated). */
  constructor(url: string | readonly string[], options: MemoryOptions = {}) {
    const { key, history = "default", profile, ...settings } = options;
    const urls = (typeof url === "string" ? url.split(",") : [...url]).map((u) => u.trim().replace(/\/+$/, "")).filter(Boolean);
    if (!urls.length || !urls.every((u) => /^https?:\/\//.test(u))) {
      throw new InvalidInputError(`${JSON.stringify(url)} is not a server URL (http:// or https://, comma-separated)`);
    }
    const apiKey = key ?? globalThis.process?.env?.[KEY_ENV];
    if (typeof apiKey !== "string" || !apiKey.trim()) {
      throw new InvalidInputError(`a memory at a URL needs an API key: key or ${KEY_ENV}`);
    }
    if (typeof history !== "string" || !history.trim()) {
      throw new InvalidInputError(`history must be a non-empty string, got ${JSON.stringify(history)}`);
    }
    this.history = history.trim();
    this.urls = urls;
    this.profile = profile;
    this.http = new Transport(urls, apiKey.trim(), settings);
  }

  /** Attempts made again after a retryable failure, over this object's life. */
  get retries(): number {
    return this.http.retries;
  }

  private get h(): { history: string } {
    return { history: this.history };
  }

  // -- writing ---------------------------------------------------------------------------------------
  /** Write one session of turns; returns the new unit ids. */
  async addSession(turns: Turn[], options: WriteOptions = {}): Promise<string[]> {
    const { sessionId = null, date = null, requestId, signal } = options;
    return this.http.run({
      route: "POST /v1/histories/{history}/sessions", path: this.h, headers: written(requestId), signal,
      body: { turns, session_id: sessionId, date }, read: (a) => a.units,
    });
  }

  /** Write an OpenAI-format chat history as one session; returns the new unit ids. */
  async addMessages(messages: ChatMessage[], options: WriteOptions = {}): Promise<string[]> {
    const { sessionId = null, date = null, requestId, signal } = options;
    return this.http.run({
      route: "POST /v1/histories/{history}/messages", path: this.h, headers: written(requestId), signal,
      body: { messages, session_id: sessionId, date }, read: (a) => a.units,
    });
  }

  /** Write many sessions, each in its own transaction, in order; returns each one's unit ids. */
  async addSessions(sessions: Session[], options: Omit<WriteOptions, "sessionId" | "date"> = {}): Promise<string[][]> {
    const headers = written(options.requestId);
    if (!sessions.length) return []; // nothing to write, as locally (the server takes no empty batch)
    return this.http.run({
      route: "POST /v1/histories/{history}/batch", path: this.h, headers, signal: options.signal,
      body: { sessions }, read: (a) => a.sessions,
    });
  }

  /** Delete this history and its agent sessions (false: there was nothing). */
  async drop(options: CallOptions = {}): Promise<boolean> {
    return this.http.run({
      route: "DELETE /v1/histories/{history}", path: this.h, signal: options.signal,
      read: (a) => a.dropped, missing: () => false,
    });
  }

  /** Delete one agent session of this history (false: there was none). */
  async dropSession(sessionId: string, options: CallOptions = {}): Promise<boolean> {
    return this.http.run({
      route: "DELETE /v1/histories/{history}/agents/{session_id}", path: { ...this.h, session_id: sessionId },
      signal: options.signal, read: (a) => a.dropped, missing: () => false,
    });
  }

  /** Erase one turn or one session's words from every copy (the chain keeps that, and why). */
  async erase(what: { turn?: string; session?: string; reason?: string; marker?: boolean }, options: CallOptions = {}): Promise<Erasure> {
    if ((what.turn === undefined) === (what.session === undefined)) {
      throw new InvalidInputError("erase takes one of turn or session");
    }
    const { turn = null, session = null, reason = "", marker = true } = what;
    return this.http.run({
      route: "POST /v1/histories/{history}/erase", path: this.h, signal: options.signal,
      body: { turn, session, reason, marker }, read: (a) => a,
    });
  }

  async erasures(options: CallOptions = {}): Promise<Erasure[]> {
    return this.http.run({
      route: "GET /v1/histories/{history}/erasures", path: this.h, signal: options.signal, read: (a) => a, missing: () => [],
    });
  }

  // -- reading ---------------------------------------------------------------------------------------
  /** The memory for `query` within `budget` tokens. A history that holds nothing yet renders empty (its
   * `allowance` then is floor(0.95 * budget): the client counts no tokens of the query and prompt). */
  async render(
    query: string,
    budget: number,
    options: CallOptions & { mode?: Mode; prompt?: string; order?: string[] } = {},
  ): Promise<Rendering> {
    const { mode, prompt = "", order, signal } = options;
    const empty = (): Rendering => ({
      text: "", tokens: 0, allowance: Math.floor(0.95 * budget), mode: mode ?? "auto", pass_through: false,
      composition: {}, shown: [], merges_written: 0, timeline_spans: [], profile: this.profile ?? null, overrides: {},
    });
    return this.http.run({
      route: "POST /v1/histories/{history}/render", path: this.h, signal,
      body: { query, budget, prompt, ...(mode && { mode }), ...(order && { order }), ...(this.profile && { profile: this.profile }) },
      read: (a) => a,
      missing: order ? undefined : empty, // with an order the 404 may be a unit's: thrown, as locally
    });
  }

  /** The turns a render ranks first for `query`, best first, no budget. */
  async search(query: string, options: CallOptions & { mode?: "auto" | "pieces"; limit?: number } = {}): Promise<Hit[]> {
    const { mode = "auto", limit = 10, signal } = options;
    return this.http.run({
      route: "POST /v1/histories/{history}/search", path: this.h, signal,
      body: { query, mode, limit }, read: (a) => a, missing: () => [],
    });
  }

  /** Notes `start` to `stop` (all by default), oldest first, in full. */
  async notes(options: CallOptions & { start?: number; stop?: number } = {}): Promise<Note[]> {
    const { start = 0, stop, signal } = options;
    const out: Note[] = [];
    for (;;) {
      const first = start + out.length;
      const limit = stop === undefined ? NOTES_PAGE : Math.min(NOTES_PAGE, stop - first);
      if (limit <= 0) return out;
      const page = await this.http.run({
        route: "GET /v1/histories/{history}/notes-full", path: this.h, query: { start: first, limit }, signal,
        read: (a) => a, missing: () => [],
      });
      out.push(...page);
      if (page.length < limit) return out;
    }
  }

  /** One note in full, by unit id or label (`u3`). */
  async note(unitId: string, options: CallOptions = {}): Promise<Note> {
    return this.http.run({
      route: "GET /v1/histories/{history}/notes/{unit}", path: { ...this.h, unit: unitId }, signal: options.signal,
      read: (a) => a,
    });
  }

  /** How many notes the history holds (Python's `len(mem)`). */
  async count(options: CallOptions = {}): Promise<number> {
    return this.http.run({
      route: "GET /v1/histories/{history}", path: this.h, signal: options.signal, read: (a) => a.notes, missing: () => 0,
    });
  }

  /** The key's tenant's histories. */
  async histories(options: CallOptions = {}): Promise<HistoryInfo[]> {
    return this.http.run({ route: "GET /v1/histories", path: {}, signal: options.signal, read: (a) => a });
  }

  /** This history's agent sessions. */
  async sessions(options: CallOptions = {}): Promise<string[]> {
    return this.http.run({
      route: "GET /v1/histories/{history}/agents", path: this.h, signal: options.signal, read: (a) => a, missing: () => [],
    });
  }

  /** [] unless a stored row changed after writing; with `heads` kept earlier, a rollback too. */
  async verify(options: CallOptions & { heads?: Head[] } = {}): Promise<string[]> {
    const { heads, signal } = options;
    if (heads === undefined) {
      return this.http.run({
        route: "GET /v1/histories/{history}/verify", path: this.h, signal, read: (a) => a.problems, missing: () => [],
      });
    }
    return this.http.run({
      route: "POST /v1/histories/{history}/verify", path: this.h, signal,
      body: { heads: heads as unknown as Record<string, unknown>[] }, read: (a) => a.problems,
    });
  }

  /** The history's head, signed by the server: keep it, and give it to verify() later. */
  async head(options: CallOptions = {}): Promise<Head> {
    return this.http.run({ route: "GET /v1/histories/{history}/head", path: this.h, signal: options.signal, read: (a) => a });
  }

  /** The history and its agent sessions as checkable JSON Lines (`flexamem import` reads them). */
  async export(options: CallOptions = {}): Promise<string> {
    return this.http.run({
      route: "GET /v1/histories/{history}/export", path: this.h, signal: options.signal, text: true, read: (a) => a,
    });
  }

  // -- agents ----------------------------------------------------------------------------------------
  /** Start an agent session (`task`, `budget`), or resume one (`sessionId` alone). A start carries a
   * session id (yours, or a new one), so a retried start resumes it. */
  async agent(
    options: CallOptions & { task?: string; budget?: number; system?: string; sessionId?: string },
  ): Promise<AgentSession> {
    const { task, budget, system = "", sessionId, signal } = options;
    if (task === undefined || budget === undefined) {
      if (sessionId === undefined) {
        throw new InvalidInputError("give task and budget to start an agent session, or sessionId to resume one");
      }
      const session = await this.http.run({
        route: "GET /v1/histories/{history}/agents/{session_id}", path: { ...this.h, session_id: sessionId.trim() },
        signal, read: (a) => new AgentSession(this, a),
      });
      if (task !== undefined && task !== session.task) {
        throw new InvalidInputError(`agent session ${JSON.stringify(session.sessionId)} was started with another task`);
      }
      if (budget !== undefined && budget !== session.budget) {
        throw new InvalidInputError(
          `agent session ${JSON.stringify(session.sessionId)} was started with budget ${session.budget}: resume it ` +
            "without budget (or with the same), or start a new session for another budget",
        );
      }
      return session;
    }
    return this.http.run({
      route: "POST /v1/histories/{history}/agents", path: this.h, signal,
      body: { task, budget, system, session_id: sessionId ?? newId().slice(0, 12) },
      read: (a) => new AgentSession(this, a),
    });
  }
}

/** An agent session on the server. Every step carries a step id (yours, or a new one), so a retried
 * step is recorded once. */
export class AgentSession {
  readonly sessionId: string;
  readonly task: string;
  readonly system: string;
  readonly budget: number;
  stepCount: number;
  messageCount: number;

  constructor(
    readonly memory: Memory,
    data: AgentOut,
  ) {
    this.sessionId = data.session_id;
    this.task = data.task;
    this.system = data.system;
    this.budget = data.budget;
    this.stepCount = data.steps;
    this.messageCount = data.messages;
  }

  private get path(): { history: string; session_id: string } {
    return { history: this.memory.history, session_id: this.sessionId };
  }

  /** Record one step (an action and what came back); returns its number. */
  async step(
    action: string,
    observation = "",
    options: CallOptions & { actor?: string; messages?: ChatMessage[]; stepId?: string } = {},
  ): Promise<number> {
    const { actor = "assistant", messages = null, stepId = newId(), signal } = options;
    return this.memory.http.run({
      route: "POST /v1/histories/{history}/agents/{session_id}/steps", path: this.path, signal,
      body: { action, observation, actor, messages, step_id: stepId },
      read: (a) => {
        this.stepCount = Math.max(this.stepCount, a.step);
        this.messageCount = a.messages;
        return a.step;
      },
    });
  }

  /** The next model call's context: system, task, one memory message, the recent window. */
  async context(options: CallOptions & { mode?: Mode } = {}): Promise<AgentContext> {
    const { mode = "auto", signal } = options;
    return this.memory.http.run({
      route: "GET /v1/histories/{history}/agents/{session_id}/context", path: this.path, query: { mode }, signal,
      read: (a) => ({
        messages: a.messages, tokens: a.tokens, ceiling: a.ceiling, pass_through: !a.memory_active, cut: a.cut, notes: a.notes,
      }),
    });
  }

  /** The context's messages (OpenAI format), within floor(0.95 * budget) tokens. */
  async messages(options: CallOptions & { mode?: Mode } = {}): Promise<ChatMessage[]> {
    return (await this.context(options)).messages;
  }

  /** Erase step `step`'s words (as `AgentSession.erase` in Python). */
  async erase(step: number, options: CallOptions & { reason?: string; marker?: boolean } = {}): Promise<Erasure> {
    const { reason = "", marker = true, signal } = options;
    return this.memory.http.run({
      route: "POST /v1/histories/{history}/erase", path: { history: this.memory.history }, signal,
      body: { agent: this.sessionId, step, reason, marker }, read: (a) => a,
    });
  }

  /** This session's head. */
  async head(options: CallOptions = {}): Promise<Head> {
    return this.memory.http.run({
      route: "GET /v1/histories/{history}/agents/{session_id}/head", path: this.path, signal: options.signal, read: (a) => a,
    });
  }
}
