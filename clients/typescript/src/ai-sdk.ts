// FlexA-Mem for the Vercel AI SDK (`ai` 6): a language-model middleware that, before each call, renders
// the memory for the user's newest message under a token budget and hands it to the model as a system
// message, and after the call records the turn (the user's message and the model's text) in the memory.
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

  /** The turn to record: the user's message when the call answers one (not a tool result), and the
   * model's text; nothing when both are empty (a call that only asked for a tool). */
  async function remember(params: Params, answer: string): Promise<void> {
    const last = params.prompt.at(-1);
    const asked = last?.role === "user" ? textOf(last) : "";
    const messages = [
      ...(asked.trim() ? [{ role: "user", content: asked }] : []),
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

/** A prompt message's text (its text parts, joined). */
function textOf(message: Message): string {
  if (typeof message.content === "string") return message.content;
  return message.content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("\n");
}
