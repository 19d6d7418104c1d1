// One API: test/script.json (writes, renders in every mode, an ordered render, searches, notes, an agent
// session, an erasure, deletes) gives over HTTP through this client exactly what a local Python Memory
// gives for the same writes, byte for byte: a real `flexamem serve` on SQLite, and on PostgreSQL when
// FLEXAMEM_TEST_POSTGRES holds a URL (two servers of one database, the client given both: the first
// is killed after the writes, and the rest is answered by the second).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { Memory } from "../src/index.js";
import { localAnswers, runScript } from "./script.js";
import { NO_POSTGRES, ServerProcess, addKey, canonical, postgresUrl, startServer, tempDir } from "./servers.js";

function assertSame(local: Record<string, string>, remote: Record<string, unknown>): void {
  assert.deepEqual(Object.keys(remote), Object.keys(local));
  for (const [name, expected] of Object.entries(local)) {
    assert.equal(canonical(remote[name]), expected, `"${name}" differs over HTTP`);
  }
}

describe("the same script locally and over HTTP", () => {
  let local: Record<string, string>;
  before(() => {
    local = localAnswers(join(tempDir(), "local.db"));
  });

  test("on a SQLite server, every answer is the local one, byte for byte", async () => {
    const { server, key } = await startServer({ workers: 2 });
    try {
      const mem = new Memory(server.url, { key, history: "same" });
      const remote = await runScript(mem);
      assertSame(local, remote);
      const renders = Object.entries(remote).filter(([, v]) => v && typeof v === "object" && "allowance" in v);
      assert.ok(renders.length >= 7);
      for (const [name, r] of renders) {
        const { text, tokens, allowance } = r as { text: string; tokens: number; allowance: number };
        assert.ok(text.length > 0 && tokens <= allowance, name); // real renders, within their budget
      }
      assert.equal(await mem.drop(), true);
      assert.equal(await mem.count(), 0);
      assert.equal(await mem.drop(), false);
    } finally {
      await server.stop();
    }
  });

  test("on PostgreSQL, through two servers of one database, the first killed halfway", { skip: NO_POSTGRES }, async () => {
    const dir = tempDir();
    const keyfile = join(dir, "keys.json");
    const key = addKey(keyfile, `t${randomUUID().slice(0, 8)}`); // a tenant no other test uses
    const servers = await Promise.all(
      [0, 1].map(async (i) => (await ServerProcess.create(postgresUrl(), keyfile, join(dir, `s${i}.log`))).start()),
    );
    try {
      const mem = new Memory(servers.map((s) => s.url), { key, history: "same" });
      const remote = await runScript(mem, { "render auto": () => servers[0]!.kill() }); // writes on one, reads on the other
      assert.ok(mem.retries > 0 && mem.http.current % 2 === 1, "the client moved to the second server");
      assertSame(local, remote);
    } finally {
      await Promise.all(servers.map((s) => s.stop()));
    }
  });
});

