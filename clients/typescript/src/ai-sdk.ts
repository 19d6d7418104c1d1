// FlexA-Mem for the Vercel AI SDK (`ai` 6): a language-model middleware that, before each call, renders
// the memory for the user's newest message under a token budget and hands it to the model as a system
// message, and after the call records what the call added in the memory: the user's message or the tool
// calls the call answers with their results, and the model's text.
//
//   const model = wrapLanguageModel({ model: openai("gpt-4o-mini"), middleware: flexamemMiddleware({ memory, budget: 4000 }) });
//   await generateText({ model, prompt: "Which card gets the refund?" });
//
// `ai` is imported for its types only: nothing of it is loaded at run time, so it is an optional peer
// dependency of this package (the client itself needs none).
import type { LanguageModelMiddleware } from "ai";
import type { Memory, Mode, Rendering } from "./memory.js";

type Middleware = LanguageModelMiddleware;
type Params = Parameters<NonNullable<Middleware["transformParams"]>>[0]["params"];
type Message = Params["prompt"][number];

export const MEMORY_HEADER = "Memory of earlier conversations (records of past turns; some recovered verbatim):\n";

export interface MemoryMiddlewareOptions {
  memory: Memory;
  /** Tokens for the call's system prompt, the user's newest message and the memory together: the three
   * stay within floor(0.95 * budget) (messages before the newest one come on top). */
  budget: number;
  mode?: Mode;
  /** Record each turn after the call (default true); false: read the memory only. */
  record?: boolean;
  /** Put before the memory in its system message (default MEMORY_HEADER). */
  header?: string;
  /** Called with each rendering (what the model was shown, its tokens and allowance). */
  onRender?: (rendering: Rendering) => void;
}

/** A `LanguageModelMiddleware` (for `wrapLanguageModel`) that fills the call with FlexA-Mem's memory
 * under `budget` and records the turn after it, for generate and stream calls alike. */
export function flexamemMiddleware(options: MemoryMiddlewareOptions): Middleware {
  const { memory, budget, mode, record = true, header = MEMORY_HEADER, onRender } = options;

  /** What this call adds, recorded as one session: the user's message when the call answers one; when
   * it answers tool results (a later step of a multi-step call), the tool calls of the step before, as
   * `[tool call <id>] name(input)` lines, and their results verbatim, each under its call's id; then
   * the model's text. A call's own tool calls are recorded by the call that gets their results, so a
   * call and its result stay together. Nothing when all are empty (a step that only asked for a tool). */
  async function remember(params: Params, answer: string): Promise<void> {
    const last = params.prompt.at(-1);
    const asked = last?.role === "user" ? textOf(last) : "";
    const messages: Array<Record<string, unknown>> = [
      ...(asked.trim() ? [{ role: "user", content: asked }] : []),
      ...(last?.role === "tool" ? toolTurns(params.prompt) : []),
      ...(answer.trim() ? [{ role: "assistant", content: answer }] : []),
    ];
    if (record && messages.length) await memory.addMessages(messages, { signal: params.abortSignal });
  }

  return {
    specificationVersion: "v3",

    async transformParams({ params }) {
      const user = params.prompt.findLast((m) => m.role === "user");
      const query = user ? textOf(user) : "";
      if (!query.trim()) return params;
      const leading = params.prompt.findIndex((m) => m.role !== "system");
      const head = leading === -1 ? params.prompt.length : leading;
      const system = params.prompt.slice(0, head).map(textOf).join("\n");
      const rendering = await memory.render(query, budget, { mode, prompt: system, signal: params.abortSignal });
      onRender?.(rendering);
      if (!rendering.text) return params;
      const memoryMessage: Message = { role: "system", content: header + rendering.text };
      return { ...params, prompt: [...params.prompt.slice(0, head), memoryMessage, ...params.prompt.slice(head)] };
    },

    async wrapGenerate({ doGenerate, params }) {
      const result = await doGenerate();
      const answer = result.content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("");
      await remember(params, answer);
      return result;
    },

    async wrapStream({ doStream, params }) {
      const { stream, ...rest } = await doStream();
      let answer = "";
      let done = false;
      const recorded = new TransformStream<(typeof stream extends ReadableStream<infer P> ? P : never)>({
        async transform(part, controller) {
          if (part.type === "text-delta") answer += part.delta;
          if (part.type === "finish" && !done) {
            done = true;
            await remember(params, answer); // before the caller hears the answer is complete
          }
          controller.enqueue(part);
        },
        async flush() {
          if (!done) await remember(params, answer); // a stream that ended without its finish part
        },
      });
      return { stream: stream.pipeThrough(recorded), ...rest };
    },
  };
}

/** The tool calls the prompt's last run of tool messages answers, and the results, in the chat format
 * `addMessages` takes (an assistant message with `tool_calls`, then one `tool` message per result). */
function toolTurns(prompt: Params["prompt"]): Array<Record<string, unknown>> {
  let start = prompt.length;
  while (start > 0 && prompt[start - 1]!.role === "tool") start--;
  const results = prompt.slice(start).flatMap((m) => (m.role === "tool" ? m.content : []));
  const answered = new Set(results.flatMap((p) => (p.type === "tool-result" ? [p.toolCallId] : [])));
  const asking = prompt[start - 1];
  const calls = asking?.role === "assistant" && typeof asking.content !== "string"
    ? asking.content.flatMap((p) => (p.type === "tool-call" && answered.has(p.toolCallId) ? [p] : []))
    : [];
  const called = new Set(calls.map((c) => c.toolCallId));
  const out: Array<Record<string, unknown>> = [];
  if (calls.length) {
    out.push({
      role: "assistant",
      content: "",
      tool_calls: calls.map((c) => ({
        id: c.toolCallId, type: "function", function: { name: c.toolName, arguments: jsonText(c.input) },
      })),
    });
  }
  for (const part of results) {
    if (part.type !== "tool-result") continue;
    const text = outputText(part.output);
    if (!text.trim()) continue;
    // a result whose call is not in the prompt keeps its tool's name and id in its text
    out.push(called.has(part.toolCallId)
      ? { role: "tool", name: part.toolName, tool_call_id: part.toolCallId, content: text }
      : { role: "tool", name: part.toolName, content: `[tool result ${part.toolCallId}] ${text}` });
  }
  return out;
}

type ToolOutput = Extract<Params["prompt"][number], { role: "tool" }>["content"][number] extends infer P
  ? P extends { type: "tool-result"; output: infer O } ? O : never
  : never;

/** A tool result's output as text: text kept verbatim, JSON as JSON text, content parts' text joined. */
function outputText(output: ToolOutput): string {
  switch (output.type) {
    case "text":
    case "error-text":
      return output.value;
    case "json":
    case "error-json":
      return jsonText(output.value);
    case "execution-denied":
      return `[execution denied]${output.reason ? ` ${output.reason}` : ""}`;
    case "content":
      return output.value.map((p) => (p.type === "text" ? p.text : `[${p.type}]`)).join("\n");
    default:
      return "";
  }
}

function jsonText(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value) ?? "";
}

/** A prompt message's text (its text parts, joined). */
function textOf(message: Message): string {
  if (typeof message.content === "string") return message.content;
  return message.content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("\n");
}
