// The Vercel AI SDK middleware against a real `flexamem serve`, with the SDK's own mock model
// (`ai/test`'s MockLanguageModelV3): generateText and streamText see the memory rendered for the user's
// message within the budget, and each turn is recorded once after the call.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { generateText, jsonSchema, stepCountIs, streamText, tool, wrapLanguageModel } from "ai";
import { MockLanguageModelV3, convertArrayToReadableStream } from "ai/test";
import { Memory, type Rendering } from "../src/index.js";
import { MEMORY_HEADER, flexamemMiddleware } from "../src/ai-sdk.js";
import { type ServerProcess, startServer } from "./servers.js";

type Prompt = Array<{ role: string; content: unknown }>;
const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const finishReason = { unified: "stop" as const, raw: "stop" };

/** A stand-in model that answers from what its system messages hold: the card's last digits, if any. */
function answer(prompt: Prompt): string {
  const system = prompt.filter((m) => m.role === "system").map((m) => String(m.content)).join("\n");
  const card = /ends in (\d{4})/.exec(system);
  return card ? `The refund goes to the Visa ending ${card[1]}.` : "I do not know which card.";
}

function mockModel(seen: Prompt[]): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    doGenerate: async (options) => {
      seen.push(options.prompt as Prompt);
      return { content: [{ type: "text", text: answer(options.prompt as Prompt) }], finishReason, usage, warnings: [] };
    },
    doStream: async (options) => {
      seen.push(options.prompt as Prompt);
      const words = answer(options.prompt as Prompt).split(/(?<= )/);
      return {
        stream: convertArrayToReadableStream([
          { type: "text-start", id: "t" },
          ...words.map((delta) => ({ type: "text-delta" as const, id: "t", delta })),
          { type: "text-end", id: "t" },
          { type: "finish", finishReason, usage },
        ]),
      };
    },
  });
}

describe("flexamemMiddleware", () => {
  let server: ServerProcess;
  let key: string;
  before(async () => ({ server, key } = await startServer()));
  after(() => server.stop());

  test("generateText: the memory fills the call under the budget, and the turn is recorded after it", async () => {
    const memory = new Memory(server.url, { key, history: "generate" });
    await memory.addSession([{ speaker: "Ana", text: "Please refund the hotel to my Visa; it ends in 4417." }], { sessionId: "old" });
    for (let i = 0; i < 30; i++) {
      await memory.addSession([{ speaker: "Ana", text: `Day ${i}: ${"we walked along the river and talked about books. ".repeat(6)}` }]);
    }
    const seen: Prompt[] = [];
    const renders: Rendering[] = [];
    const budget = 300;
    const model = wrapLanguageModel({
      model: mockModel(seen),
      middleware: flexamemMiddleware({ memory, budget, onRender: (r) => renders.push(r) }),
    });
    const result = await generateText({ model, system: "You are terse.", prompt: "Which card gets the hotel refund?" });
    assert.equal(result.text, "The refund goes to the Visa ending 4417.");
    const [prompt] = seen;
    assert.deepEqual(prompt!.map((m) => m.role), ["system", "system", "user"]);
    assert.equal(prompt![0]!.content, "You are terse.");
    const [rendering] = renders;
    assert.equal(prompt![1]!.content, MEMORY_HEADER + rendering!.text);
    assert.ok(rendering!.tokens <= rendering!.allowance && rendering!.allowance < Math.floor(0.95 * budget));
    assert.ok(!rendering!.pass_through, "the history did not fit: the budget chose what to show");
    const notes = await memory.notes({ start: 31 });
    assert.deepEqual(notes.map((n) => n.raw), ["user: Which card gets the hotel refund?\nassistant: The refund goes to the Visa ending 4417."]);
  });

  test("streamText: the same, the turn recorded once the answer has streamed", async () => {
    const memory = new Memory(server.url, { key, history: "stream" });
    const seen: Prompt[] = [];
    const model = wrapLanguageModel({ model: mockModel(seen), middleware: flexamemMiddleware({ memory, budget: 2000 }) });
    const first = streamText({ model, prompt: "My Visa ends in 9021; refund the hotel to it." });
    assert.equal(await first.text, "I do not know which card.");
    assert.deepEqual(seen[0]!.map((m) => m.role), ["user"]); // nothing in memory yet: no memory message
    const second = streamText({ model, messages: [{ role: "user", content: "Which card gets the refund?" }] });
    assert.equal(await second.text, "The refund goes to the Visa ending 9021."); // remembered from the first call
    const raws = (await memory.notes()).map((n) => n.raw);
    assert.deepEqual(raws, [
      "user: My Visa ends in 9021; refund the hotel to it.\nassistant: I do not know which card.",
      "user: Which card gets the refund?\nassistant: The refund goes to the Visa ending 9021.",
    ]);
  });

  test("a tool step: the call and its result are recorded verbatim with the answer, and a later call recovers them", async () => {
    const memory = new Memory(server.url, { key, history: "tools" });
    const seen: Prompt[] = [];
    const model = new MockLanguageModelV3({
      doGenerate: async (options) => {
        seen.push(options.prompt as Prompt);
        const last = options.prompt.at(-1)!;
        if (last.role === "tool") { // the second step: answer from the tool's result
          const part = last.content[0]!;
          const value = part.type === "tool-result" && part.output.type === "json" ? part.output.value : null;
          const card = (value as { card?: string } | null)?.card ?? "?";
          return { content: [{ type: "text", text: `Refunded to card ${card}.` }], finishReason, usage, warnings: [] };
        }
        if (/which card/i.test(JSON.stringify(last.content))) { // a later call: answer from the memory
          const memoryText = (options.prompt as Prompt).filter((m) => m.role === "system").map((m) => String(m.content)).join("\n");
          const found = /"card":"([A-Z]{2}-\d{4})"/.exec(memoryText); // the tool's own result, not the answer's words
          return { content: [{ type: "text", text: found ? `It was ${found[1]}.` : "I do not know." }], finishReason, usage, warnings: [] };
        }
        return {
          content: [{ type: "tool-call", toolCallId: "call-7", toolName: "refund", input: JSON.stringify({ booking: "LIS-2291" }) }],
          finishReason: { unified: "tool-calls" as const, raw: "tool_calls" }, usage, warnings: [],
        };
      },
    });
    const refund = tool({
      description: "Refund a booking; answers the card refunded.",
      inputSchema: jsonSchema<{ booking: string }>({ type: "object", properties: { booking: { type: "string" } }, required: ["booking"] }),
      execute: async ({ booking }) => ({ booking, card: "VX-4417", status: "refunded" }),
    });
    const wrapped = wrapLanguageModel({ model, middleware: flexamemMiddleware({ memory, budget: 2000 }) });
    const first = await generateText({ model: wrapped, prompt: "Refund booking LIS-2291.", tools: { refund }, stopWhen: stepCountIs(3) });
    assert.equal(first.text, "Refunded to card VX-4417.");
    assert.equal(seen.length, 2);
    const raws = (await memory.notes()).map((n) => n.raw);
    assert.deepEqual(raws, [
      "user: Refund booking LIS-2291.",
      'assistant: [tool call call-7] refund({"booking":"LIS-2291"})\n' +
        'refund: {"booking":"LIS-2291","card":"VX-4417","status":"refunded"}\n' +
        "assistant: Refunded to card VX-4417.",
    ]);
    // a later conversation: the tool's exact string comes back through the memory
    const later = await generateText({ model: wrapped, prompt: "Which card did the refund go to?" });
    assert.ok(String(seen.at(-1)!.find((m) => m.role === "system")?.content).includes('"card":"VX-4417"'));
    assert.equal(later.text, "It was VX-4417.");
  });

  test("record: false reads the memory and writes nothing", async () => {
    const memory = new Memory(server.url, { key, history: "read-only" });
    await memory.addSession([{ speaker: "Ana", text: "My Visa ends in 5555." }]);
    const model = wrapLanguageModel({ model: mockModel([]), middleware: flexamemMiddleware({ memory, budget: 1000, record: false }) });
    assert.equal((await generateText({ model, prompt: "Which card?" })).text, "The refund goes to the Visa ending 5555.");
    assert.equal(await memory.count(), 1);
  });
});
