// Retries that lose nothing and double nothing, against real servers: killed with SIGKILL mid-loop and
// restarted (SQLite), answers lost on the way back (a proxy that drops a quarter of them), and one of two
// servers of one PostgreSQL killed while the client, given both URLs, carries on through the other.
// Every write the client saw acknowledged is stored exactly once, and each acknowledged step once.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { type IncomingMessage, type ServerResponse, createServer, request } from "node:http";
import { join } from "node:path";
import { test } from "node:test";
import { Memory } from "../src/index.js";
import { NO_POSTGRES, ServerProcess, addKey, freePort, postgresUrl, startServer, tempDir } from "./servers.js";

const PATIENT = { retrySeconds: 90, timeout: 30 };
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A client's write loop: sessions (named and not), batches, agent steps and renders, until stopped;
 * what was acknowledged is kept. */
class Writer {
  readonly mem: Memory;
  readonly acked: Array<{ raw: string; units: string[] }> = [];
  steps = 0;
  stopped = false;
  done: Promise<void> = Promise.resolve();

  constructor(
    url: string | string[],
    key: string,
    readonly history: string,
  ) {
    this.mem = new Memory(url, { key, history, ...PATIENT });
  }

  start(): this {
    this.done = (async () => {
      const agent = await this.mem.agent({ task: "keep notes", budget: 2000, sessionId: "a1" });
      for (let i = 0; !this.stopped; i++) {
        const text = `${this.history} note ${i}: code ${randomUUID().slice(0, 8)}`;
        if (i % 6 === 5) {
          const batch = await this.mem.addSessions([
            { turns: [{ speaker: "Bo", text: `${text} (a)` }] },
            { turns: [{ speaker: "Bo", text: `${text} (b)` }], session_id: `b${i}` },
          ]);
          this.acked.push({ raw: `Bo: ${text} (a)`, units: batch[0]! }, { raw: `Bo: ${text} (b)`, units: batch[1]! });
        } else {
          const units = await this.mem.addSession([{ speaker: "Ana", text }], i % 3 === 0 ? { sessionId: `n${i}` } : {});
          this.acked.push({ raw: `Ana: ${text}`, units });
        }
        if (i % 4 === 0) this.steps = await agent.step(`echo ${i}`, `step ${i} `.repeat(20));
        if (i % 5 === 0) assert.ok((await this.mem.render("code", 400)).tokens <= 380);
      }
    })();
    return this;
  }

  /** Resolves once `n` writes are acknowledged in all (counted, not timed: the machine may be busy). */
  async reached(n: number, timeoutMs = 240_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.acked.length < n) {
      if (this.stopped || Date.now() > deadline) throw new Error(`${this.acked.length} of ${n} writes acknowledged`);
      await Promise.race([pause(50), this.done]);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }

  /** Nothing doubled, nothing acknowledged lost, each acknowledged step once (read through `url`). */
  async check(url: string, key: string): Promise<void> {
    assert.ok(this.acked.length > 10, `only ${this.acked.length} writes acknowledged`);
    assert.ok(this.mem.retries > 0, "the fault reached this client mid-run: it retried");
    const reader = new Memory(url, { key, history: this.history });
    const notes = await reader.notes();
    const seen = new Map<string, number>();
    for (const n of notes) seen.set(n.raw, (seen.get(n.raw) ?? 0) + 1);
    assert.deepEqual([...seen].filter(([, c]) => c > 1), [], "a write stored twice");
    const stored = new Map(notes.map((n) => [n.unit_id, n.raw]));
    for (const { raw, units } of this.acked) assert.deepEqual(units.map((u) => stored.get(u)), [raw], raw);
    assert.ok(notes.length <= this.acked.length + 2, "at most the write in flight at the stop, unacknowledged");
    assert.equal((await reader.agent({ sessionId: "a1" })).stepCount, this.steps);
  }
}

test("a server killed with SIGKILL mid-loop and restarted loses and doubles nothing", async () => {
  const { server, key } = await startServer();
  const writer = new Writer(server.url, key, "loop").start();
  try {
    await writer.reached(8);
    await server.kill(); // a write is in flight: the loop never waits between writes
    await pause(1000);
    await server.start();
    await writer.reached(writer.acked.length + 8);
    await writer.stop();
    await writer.check(server.url, key);
  } finally {
    writer.stopped = true;
    await writer.done.catch(() => undefined);
    await server.stop();
  }
});

test("answers lost on the way back are retried without storing twice", async () => {
  const { server, key } = await startServer();
  const proxy = await losingProxy(server.port, 0.25);
  const writer = new Writer(proxy.url, key, "lossy").start();
  try {
    for (let n = 8; proxy.lost() < 6; n += 4) await writer.reached(n);
    await writer.stop();
    await writer.check(server.url, key);
  } finally {
    writer.stopped = true;
    await writer.done.catch(() => undefined);
    proxy.close();
    await server.stop();
  }
});

test(
  "one of two servers of a PostgreSQL store killed: the client carries on through the other",
  { skip: NO_POSTGRES },
  async () => {
    const dir = tempDir();
    const keyfile = join(dir, "keys.json");
    const key = addKey(keyfile, `t${randomUUID().slice(0, 8)}`);
    const servers = await Promise.all(
      [0, 1].map(async (i) => (await ServerProcess.create(postgresUrl(), keyfile, join(dir, `s${i}.log`))).start()),
    );
    const writer = new Writer(servers.map((s) => s.url), key, "listed").start();
    try {
      await writer.reached(8);
      await servers[0]!.kill();
      await writer.reached(writer.acked.length + 8);
      await writer.stop();
      await writer.check(servers[1]!.url, key);
    } finally {
      writer.stopped = true;
      await writer.done.catch(() => undefined);
      await Promise.all(servers.map((s) => s.stop()));
    }
  },
);

/** A proxy to 127.0.0.1:`port` that drops a share of the answers after the server has sent them (the
 * connection cut instead of the answer). */
async function losingProxy(port: number, share: number): Promise<{ url: string; lost: () => number; close: () => void }> {
  let lost = 0;
  let n = 0;
  const proxy = createServer((req: IncomingMessage, res: ServerResponse) => {
    const upstream = request(
      { host: "127.0.0.1", port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        const chunks: Buffer[] = [];
        answer.on("data", (c: Buffer) => chunks.push(c));
        answer.on("end", () => {
          if (req.method === "POST" && ++n % Math.round(1 / share) === 0) {
            lost++;
            res.socket?.destroy(); // the server did the work; the client never hears of it
            return;
          }
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          res.end(Buffer.concat(chunks));
        });
      },
    );
    upstream.on("error", () => res.socket?.destroy());
    req.pipe(upstream);
  });
  const listenPort = await freePort();
  await new Promise<void>((resolve) => proxy.listen(listenPort, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${listenPort}`,
    lost: () => lost,
    close: () => {
      proxy.closeAllConnections();
      proxy.close();
    },
  };
}
