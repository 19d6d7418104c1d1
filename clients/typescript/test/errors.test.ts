// Errors: the same classes as the Python library (names and family tree, read from flexamem.errors),
// thrown for a real server's answers; a dead server, a server that never answers (the timeout), a list
// of URLs whose first is dead (failover), and the caller's AbortSignal.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";
import * as fm from "../src/index.js";
import { ERROR_CLASSES, Memory } from "../src/index.js";
import { type ServerProcess, freePort, python, startServer } from "./servers.js";

test("one class per Python error, with the same names and parents", () => {
  const code = [
    "import json",
    "from flexamem.errors import error_classes",
    "print(json.dumps({n: [b.__name__ for b in c.__bases__ if b.__module__ == c.__module__] for n, c in error_classes().items()}))",
  ].join("\n");
  const pythonTree = JSON.parse(python(["-c", code])) as Record<string, string[]>;
  const ours = Object.fromEntries(
    Object.entries(ERROR_CLASSES).map(([name, cls]) => {
      const parent = Object.getPrototypeOf(cls) as { name: string };
      return [name, parent === Error ? [] : [parent.name]];
    }),
  );
  assert.deepEqual(ours, pythonTree);
  for (const [name, cls] of Object.entries(ERROR_CLASSES)) {
    assert.equal((fm as Record<string, unknown>)[name], cls, `${name} is exported`);
    const e = new cls("m", { status: 418 });
    assert.ok(e instanceof fm.FlexaMemError && e instanceof Error && e.name === name && e.status === 418);
  }
});

describe("a real server's errors", () => {
  let server: ServerProcess;
  let key: string;
  before(async () => ({ server, key } = await startServer()));
  after(() => server.stop());

  test("arrive as the library's classes, with status and message; nothing refused is stored", async () => {
    const mem = new Memory(server.url, { key, history: "errors" });
    await assert.rejects(mem.note("u1"), (e: unknown) => e instanceof fm.NotFoundError && e.status === 404 && /no history/.test(e.message));
    assert.deepEqual([await mem.notes(), await mem.count(), await mem.sessions(), await mem.search("x")], [[], 0, [], []]);
    const empty = await mem.render("anything?", 100); // nothing written yet: an empty memory, as locally
    assert.equal(empty.text, "");
    assert.equal(empty.tokens, 0);
    await mem.addSession([{ speaker: "Ana", text: "hello" }], { sessionId: "s1" });
    await assert.rejects(mem.note("u9"), (e: unknown) => e instanceof fm.InvalidInputError && e instanceof fm.NotFoundError && /u9/.test(e.message));
    await assert.rejects(mem.addSession([{ speaker: "Ana", text: "again" }], { sessionId: "s1" }), fm.DuplicateUnitError);
    await assert.rejects(mem.render("hello", 3, { prompt: "a long fixed prompt ".repeat(5) }), fm.BudgetError);
    await assert.rejects(mem.render("hello", 0), (e: unknown) => e instanceof fm.BudgetError && e.status === 422);
    await assert.rejects(mem.addSession([{ speaker: "Ana", text: "" }]), (e: unknown) => e instanceof fm.InvalidInputError && e.status === 422);
    await mem.addSession([{ speaker: "Ana", text: "one" }], { requestId: "req-1" });
    await assert.rejects(mem.addSession([{ speaker: "Ana", text: "two" }], { requestId: "req-1" }), (e: unknown) => e instanceof fm.RequestConflictError && e.status === 409);
    const stranger = new Memory(server.url, { key: "not-a-key", history: "errors" });
    await assert.rejects(stranger.render("q", 100), (e: unknown) => e instanceof fm.UnauthorizedError && e.status === 401);
    assert.deepEqual((await mem.notes()).map((n) => n.raw), ["Ana: hello", "Ana: one"]);
  });

  test("refused before anything is sent: no key, no URL, a bad request id", async () => {
    assert.throws(() => new Memory(server.url, { key: "  " }), /API key/);
    assert.throws(() => new Memory("memory.db", { key: "k" }), fm.InvalidInputError);
    assert.throws(() => new Memory(server.url, { key: "k", retrySeconds: -1 }), /retrySeconds/);
    const mem = new Memory(server.url, { key, history: "errors" });
    await assert.rejects(mem.addSession([{ speaker: "A", text: "x" }], { requestId: "x".repeat(201) }), /requestId/);
    await assert.rejects(mem.agent({ task: "t" }), /sessionId/);
  });

  test("a retried write and a retried step are stored once", async () => {
    const mem = new Memory(server.url, { key, history: "retried" });
    const first = await mem.addSession([{ speaker: "Ana", text: "one" }], { requestId: "req-1" });
    const again = await mem.addSession([{ speaker: "Ana", text: "one" }], { requestId: "req-1" });
    const batch = await mem.addSessions([{ turns: [{ speaker: "Bo", text: "two" }] }], { requestId: "req-2" });
    const batchAgain = await mem.addSessions([{ turns: [{ speaker: "Bo", text: "two" }] }], { requestId: "req-2" });
    assert.deepEqual([first, batch], [again, batchAgain]);
    assert.deepEqual((await mem.notes()).map((n) => n.raw), ["Ana: one", "Bo: two"]);
    const agent = await mem.agent({ task: "task", budget: 1000, sessionId: "a1" });
    assert.equal(await agent.step("ls", "a b", { stepId: "x" }), 1);
    assert.equal(await agent.step("ls", "a b", { stepId: "x" }), 1);
    assert.equal((await mem.agent({ task: "task", budget: 1000, sessionId: "a1" })).stepCount, 1); // a retried start resumes
    await assert.rejects(mem.agent({ sessionId: "a1", budget: 999 }), /budget 1000/);
  });

  test("a list of URLs whose first is dead: calls go to the next one", async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const mem = new Memory(`${dead},${server.url}`, { key, history: "failover" });
    assert.deepEqual(await mem.addSession([{ speaker: "Ana", text: "over there" }]), ["s1"]);
    assert.equal(mem.http.current, 1);
    assert.equal(mem.retries, 1);
  });

  test("a named profile is sent with every render; the server's otherwise", async () => {
    const mem = new Memory(server.url, { key, history: "profiles", profile: "paper-units" });
    await mem.addSession([{ speaker: "Ana", text: "the key is under the mat" }]);
    const named = await mem.render("where is the key?", 200);
    assert.deepEqual([named.profile, named.mode], ["paper-units-v1", "units"]);
    const plain = await new Memory(server.url, { key, history: "profiles" }).render("where is the key?", 200);
    assert.deepEqual([plain.profile, plain.mode], ["auto-v1", "auto"]);
  });

  test("heads, verify against a kept head, export and erasures", async () => {
    const mem = new Memory(server.url, { key, history: "heads" });
    await mem.addSession([{ speaker: "Ana", text: "my card ends 4417", id: "t1" }]);
    const head = await mem.head();
    assert.equal(head.notes, 1);
    await mem.addSession([{ speaker: "Ana", text: "later" }]);
    assert.deepEqual(await mem.verify({ heads: [head] }), []);
    const lines = (await mem.export()).trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(lines.length >= 3 && lines.some((l) => JSON.stringify(l).includes("4417")));
    const erased = await mem.erase({ turn: "t1", reason: "asked" });
    assert.deepEqual([erased.kind, erased.ids, erased.units], ["turn", ["t1"], ["u1"]]);
    // the number alone: a digest (hex) or a time in the export may hold the same four digits
    assert.ok(!/(?<![0-9A-Za-z])4417(?![0-9A-Za-z])/.test(await mem.export()));
    assert.equal((await mem.erasures()).length, 1);
    assert.ok((await mem.histories()).some((h) => h.history === "heads" && h.notes === 2));
  });
});

test("a dead server is a StoreUnavailableError once retrySeconds have passed", async () => {
  const mem = new Memory(`http://127.0.0.1:${await freePort()}`, { key: "k", retrySeconds: 0.5 });
  const started = Date.now();
  await assert.rejects(mem.render("q", 100), (e: unknown) => e instanceof fm.StoreUnavailableError && /cannot reach/.test(e.message) && e.status === undefined);
  assert.ok(Date.now() - started < 5000 && mem.retries > 0);
});

describe("a server that accepts and never answers", () => {
  let port: number;
  const silent = createServer(() => undefined); // connections are taken and left hanging
  before(async () => {
    port = await freePort();
    await new Promise<void>((resolve) => silent.listen(port, "127.0.0.1", resolve));
  });
  after(() => silent.close());

  test("each attempt ends at the timeout, and the call after retrySeconds", async () => {
    const mem = new Memory(`http://127.0.0.1:${port}`, { key: "k", timeout: 0.3, retrySeconds: 1 });
    const started = Date.now();
    await assert.rejects(mem.render("q", 100), (e: unknown) => e instanceof fm.StoreUnavailableError && /Timeout/.test(e.message));
    const took = Date.now() - started;
    assert.ok(took >= 600 && took < 4000, `took ${took} ms`);
  });

  test("the caller's AbortSignal ends the call at once, as an AbortError, never retried", async () => {
    const mem = new Memory(`http://127.0.0.1:${port}`, { key: "k", timeout: 30, retrySeconds: 30 });
    const started = Date.now();
    await assert.rejects(mem.render("q", 100, { signal: AbortSignal.timeout(300) }), (e: unknown) => (e as Error).name === "TimeoutError");
    const controller = new AbortController();
    const call = mem.addSession([{ speaker: "A", text: "x" }], { signal: controller.signal });
    setTimeout(() => controller.abort(), 200);
    await assert.rejects(call, (e: unknown) => (e as Error).name === "AbortError");
    assert.ok(Date.now() - started < 3000);
    assert.equal(mem.retries, 0);
  });
});
