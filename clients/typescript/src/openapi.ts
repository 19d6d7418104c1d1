// Written by scripts/openapi-types.mjs from docs/openapi.json: do not edit (npm run openapi).
// FlexA-Mem 0.1.0
/* eslint-disable */

export interface AgentIn {
  budget: number;
  session_id?: string | null;
  system?: string;
  task: string;
}

export interface AgentOut {
  budget: number;
  messages: number;
  session_id: string;
  steps: number;
  system: string;
  task: string;
}

export interface Batch {
  history: string;
  sessions: Array<Array<string>>;
}

export interface BatchIn {
  sessions: Array<SessionIn>;
}

export interface ContextOut {
  ceiling: number;
  cut: boolean;
  memory_active: boolean;
  messages: Array<Record<string, unknown>>;
  notes: number;
  tokens: number;
}

export interface Dropped {
  dropped: boolean;
  history: string;
}

export interface EraseIn {
  agent?: string | null;
  marker?: boolean;
  reason?: string;
  session?: string | null;
  step?: number | null;
  turn?: string | null;
}

export interface ErasureOut {
  at: number;
  digest: string;
  ids: Array<string>;
  kind: string;
  n: number;
  reason: string;
  steps: Array<number>;
  units: Array<string>;
}

export interface ErrorBody {
  details?: Array<Record<string, string>> | null;
  message: string;
  type: string;
}

export interface ErrorOut {
  error: ErrorBody;
}

export interface HeadOut {
  digest: string;
  epoch: string;
  erasure: string;
  erasures: number;
  history: string;
  legacy: Array<number> | null;
  merge: string;
  merges: number;
  note: string;
  notes: number;
  request: string;
  requests: number;
  row: string;
  signature: string | null;
  state: string;
  step: string;
  steps: number;
  version: number;
}

export interface HeadsIn {
  heads: Array<Record<string, unknown>>;
}

export interface HistoryOut {
  history: string;
  kind: string;
  notes: number;
}

export interface HitOut {
  block: number;
  seq: number;
  text: string;
  turn_id: string | null;
  unit_id: string;
}

export interface LinkIn {
  budget?: number;
  mode?: "auto" | "pieces" | "units";
  query: string;
  seconds?: number;
}

export interface LinkOut {
  expires: number;
  url: string;
}

export interface MessagesIn {
  date?: string | null;
  messages: Array<Record<string, unknown>>;
  session_id?: string | null;
}

export interface NoteFull {
  date: string | null;
  digest: string;
  exact: Record<string, unknown>;
  fields: string;
  keywords: Array<string>;
  kind: string;
  label: string;
  links: Array<string>;
  pieces: Array<PieceOut>;
  raw: string;
  raw_tokens: number;
  record: string;
  record_tokens: number;
  session_id: string | null;
  unit_id: string;
  writer: string;
}

export interface NoteOut {
  date: string | null;
  keywords: Array<string>;
  kind: string;
  label: string;
  links: Array<string>;
  pieces: number;
  raw_tokens: number;
  record: string;
  record_tokens: number;
  session_id: string | null;
  unit_id: string;
  writer: string;
}

export interface PieceOut {
  index: number;
  text: string;
  tokens: number;
  turn: string | null;
}

export interface RenderIn {
  budget: number;
  mode?: "auto" | "pieces" | "units" | null;
  order?: Array<string> | null;
  profile?: string | null;
  prompt?: string;
  query: string;
}

export interface RenderOut {
  allowance: number;
  composition: Record<string, number>;
  merges_written: number;
  mode: string;
  overrides: Record<string, unknown>;
  pass_through: boolean;
  profile?: string | null;
  shown: Array<Shown>;
  text: string;
  timeline_spans: Array<[number, number, number]>;
  tokens: number;
}

export interface SearchIn {
  limit?: number;
  mode?: "auto" | "pieces";
  query: string;
}

export interface SessionIn {
  date?: string | null;
  session_id?: string | null;
  turns: Array<Turn>;
}

export interface Shown {
  label: string;
  pieces: Array<number>;
  resolution: string;
  unit_id: string;
  verbatim_turns: Array<string>;
}

export interface StepIn {
  action: string;
  actor?: string;
  messages?: Array<Record<string, unknown>> | null;
  observation?: string;
  step_id?: string | null;
}

export interface StepOut {
  messages: number;
  step: number;
}

export interface Turn {
  id?: string | null;
  role?: string | null;
  speaker: string;
  text: string;
}

export interface Units {
  history: string;
  units: Array<string>;
}

export interface VerifyOut {
  history: string;
  problems: Array<string>;
}

/** Every route of the server: `METHOD /path` to its parameters, JSON body and answer. */
export interface Routes {
  "GET /health": {
    path: {};
    query: {};
    headers: {};
    body: undefined;
    answer: Record<string, string>;
  };
  "GET /v1/histories": {
    path: {};
    query: {};
    headers: {};
    body: undefined;
    answer: Array<HistoryOut>;
  };
  "GET /v1/histories/{history}": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: HistoryOut;
  };
  "DELETE /v1/histories/{history}": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: Dropped;
  };
  "GET /v1/histories/{history}/agents": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: Array<string>;
  };
  "POST /v1/histories/{history}/agents": {
    path: { history: string; };
    query: {};
    headers: {};
    body: AgentIn;
    answer: AgentOut;
  };
  "GET /v1/histories/{history}/agents/{session_id}": {
    path: { history: string; session_id: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: AgentOut;
  };
  "DELETE /v1/histories/{history}/agents/{session_id}": {
    path: { history: string; session_id: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: Dropped;
  };
  "GET /v1/histories/{history}/agents/{session_id}/context": {
    path: { history: string; session_id: string; };
    query: { mode?: "auto" | "pieces" | "units"; };
    headers: {};
    body: undefined;
    answer: ContextOut;
  };
  "GET /v1/histories/{history}/agents/{session_id}/head": {
    path: { history: string; session_id: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: HeadOut;
  };
  "POST /v1/histories/{history}/agents/{session_id}/steps": {
    path: { history: string; session_id: string; };
    query: {};
    headers: {};
    body: StepIn;
    answer: StepOut;
  };
  "POST /v1/histories/{history}/batch": {
    path: { history: string; };
    query: {};
    headers: { "Idempotency-Key"?: string | null; };
    body: BatchIn;
    answer: Batch;
  };
  "POST /v1/histories/{history}/erase": {
    path: { history: string; };
    query: {};
    headers: {};
    body: EraseIn;
    answer: ErasureOut;
  };
  "GET /v1/histories/{history}/erasures": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: Array<ErasureOut>;
  };
  "GET /v1/histories/{history}/export": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: string;
  };
  "GET /v1/histories/{history}/head": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: HeadOut;
  };
  "POST /v1/histories/{history}/inspect-link": {
    path: { history: string; };
    query: {};
    headers: {};
    body: LinkIn;
    answer: LinkOut;
  };
  "POST /v1/histories/{history}/messages": {
    path: { history: string; };
    query: {};
    headers: { "Idempotency-Key"?: string | null; };
    body: MessagesIn;
    answer: Units;
  };
  "GET /v1/histories/{history}/notes": {
    path: { history: string; };
    query: { start?: number; limit?: number | null; };
    headers: {};
    body: undefined;
    answer: Array<NoteOut>;
  };
  "GET /v1/histories/{history}/notes-full": {
    path: { history: string; };
    query: { start?: number; limit?: number | null; };
    headers: {};
    body: undefined;
    answer: Array<NoteFull>;
  };
  "GET /v1/histories/{history}/notes/{unit}": {
    path: { history: string; unit: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: NoteFull;
  };
  "POST /v1/histories/{history}/render": {
    path: { history: string; };
    query: {};
    headers: {};
    body: RenderIn;
    answer: RenderOut;
  };
  "POST /v1/histories/{history}/search": {
    path: { history: string; };
    query: {};
    headers: {};
    body: SearchIn;
    answer: Array<HitOut>;
  };
  "POST /v1/histories/{history}/sessions": {
    path: { history: string; };
    query: {};
    headers: { "Idempotency-Key"?: string | null; };
    body: SessionIn;
    answer: Units;
  };
  "GET /v1/histories/{history}/verify": {
    path: { history: string; };
    query: {};
    headers: {};
    body: undefined;
    answer: VerifyOut;
  };
  "POST /v1/histories/{history}/verify": {
    path: { history: string; };
    query: {};
    headers: {};
    body: HeadsIn;
    answer: VerifyOut;
  };
}
