// flexamem: the FlexA-Mem client for TypeScript (Node 20+, no dependency beyond fetch).
export { type AgentContext, AgentSession, type CallOptions, type ChatMessage, type Erasure, type Head, type Hit,
  type HistoryInfo, Memory, type MemoryOptions, type Mode, type Note, type Rendering, type Session, type Turn,
  type WriteOptions } from "./memory.js";
export type { ClientSettings } from "./http.js";
export * from "./errors.js";
export type * as api from "./openapi.js";
