// A two-turn chat through the Vercel AI SDK whose model sees FlexA-Mem's memory: the first turn says
// which card to refund, the second asks for it; the answer comes from the memory, not from the messages.
//
//   FLEXAMEM_URL=http://127.0.0.1:8000 FLEXAMEM_API_KEY=fm_... node chat.mjs
//
// With OPENAI_BASE_URL and FLEXAMEM_EXAMPLE_MODEL set (any OpenAI-compatible endpoint: a hosted API,
// vLLM, llama.cpp's server, Ollama; OPENAI_API_KEY when it needs one) a real model answers; without them
// a stand-in model from `ai/test` answers with the line of its memory that names a card.
import { generateText, streamText, wrapLanguageModel } from "ai";
import { Memory } from "flexamem";
import { flexamemMiddleware } from "flexamem/ai-sdk";

async function chatModel() {
  if (process.env.OPENAI_BASE_URL && process.env.FLEXAMEM_EXAMPLE_MODEL) {
    const { createOpenAICompatible } = await import("@ai-sdk/openai-compatible");
    const provider = createOpenAICompatible({
      name: "local", baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY,
    });
    return provider.chatModel(process.env.FLEXAMEM_EXAMPLE_MODEL);
  }
  const { MockLanguageModelV3 } = await import("ai/test");
  const finishReason = { unified: "stop", raw: "stop" };
  const usage = { inputTokens: { total: 0 }, outputTokens: { total: 0 } };
  const answer = (prompt) => {
    const memory = prompt.filter((m) => m.role === "system").map((m) => m.content).join("\n");
    const line = memory.split("\n").find((l) => /visa/i.test(l)) ?? "(nothing about a card in my memory)";
    return `From memory: ${line.trim()}`;
  };
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => ({ content: [{ type: "text", text: answer(prompt) }], finishReason, usage, warnings: [] }),
    doStream: async ({ prompt }) => ({
      stream: ReadableStream.from([
        { type: "text-start", id: "a" },
        { type: "text-delta", id: "a", delta: answer(prompt) },
        { type: "text-end", id: "a" },
        { type: "finish", finishReason, usage },
      ]),
    }),
  });
}

const memory = new Memory(process.env.FLEXAMEM_URL ?? "http://127.0.0.1:8000", {
  key: process.env.FLEXAMEM_API_KEY, history: process.env.FLEXAMEM_HISTORY ?? "ai-sdk-example",
});
const model = wrapLanguageModel({
  model: await chatModel(),
  middleware: flexamemMiddleware({ memory, budget: 2000, onRender: (r) => console.log(`[memory: ${r.tokens} of ${r.allowance} tokens]`) }),
});
const system = "You are a support agent. Answer in one short sentence.";

const first = await generateText({ model, system, prompt: "Please refund the hotel to my Visa ending 4417." });
console.log("turn 1 ->", first.text);

// a new call with none of the earlier messages: what it knows of them comes from the memory
const second = streamText({
  model, system, prompt: "Which card did I ask you to refund the hotel to?", onError: ({ error }) => { throw error; },
});
let streamed = "";
for await (const delta of second.textStream) streamed += delta;
console.log("turn 2 ->", streamed);
console.log("notes in memory:", await memory.count());
