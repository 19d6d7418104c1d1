// Real servers for the tests: `python -m flexamem serve` on 127.0.0.1 in its own process group, started,
// waited for, stopped or killed with everything it started (as tests/servers.py does for the Python
// tests). The Python is FLEXAMEM_PYTHON, else the repository's .venv, else python3 on PATH.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, closeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root (this file is clients/typescript/dist/test/servers.js once compiled). */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
export const PACKAGE = join(ROOT, "clients", "typescript");
export const PYTHON =
  process.env.FLEXAMEM_PYTHON ?? (existsSync(join(ROOT, ".venv", "bin", "python")) ? join(ROOT, ".venv", "bin", "python") : "python3");
export const POSTGRES = process.env.FLEXAMEM_TEST_POSTGRES || undefined;
/** The PostgreSQL tests' `skip`: they run when a URL is given, and fail without one when CI requires them. */
export const NO_POSTGRES: string | false =
  POSTGRES || process.env.FLEXAMEM_REQUIRE_POSTGRES === "1" ? false : "FLEXAMEM_TEST_POSTGRES is not set";

/** The PostgreSQL URL, or a failure saying why there is none. */
export function postgresUrl(): string {
  if (!POSTGRES) throw new Error("FLEXAMEM_REQUIRE_POSTGRES=1 but FLEXAMEM_TEST_POSTGRES is not set");
  return POSTGRES;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const proc of live) killGroup(proc, "SIGKILL"); // nothing left running by a failed test
});

function killGroup(proc: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-proc.pid!, signal);
  } catch {
    // already gone
  }
}

export function tempDir(prefix = "flexamem-ts-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** Run `python args...` and return its output (an error with its stderr if it fails). */
export function python(args: string[], input?: string): string {
  return execFileSync(PYTHON, args, { input, encoding: "utf8", maxBuffer: 64 * 1024 * 1024, timeout: 300_000 });
}

/** A new API key for `tenant` in `keyfile` (the key file is made when missing). */
export function addKey(keyfile: string, tenant: string): string {
  const out = python(["-m", "flexamem", "serve", "--keys", keyfile, "--add-key", tenant]);
  return out.trim().split("\n").at(-1)!.trim();
}

export class ServerProcess {
  readonly url: string;
  proc: ChildProcess | undefined;

  constructor(
    readonly db: string,
    readonly keyfile: string,
    readonly log: string,
    readonly port: number,
    readonly workers = 1,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  static async create(db: string, keyfile: string, log: string, workers = 1): Promise<ServerProcess> {
    return new ServerProcess(db, keyfile, log, await freePort(), workers);
  }

  /** Start it and wait until /health answers. */
  async start(timeoutMs = 120_000): Promise<this> {
    const out = openSync(this.log, "a");
    const args = ["-m", "flexamem", "serve", "--db", this.db, "--keys", this.keyfile,
      "--port", String(this.port), "--workers", String(this.workers)];
    const proc = spawn(PYTHON, args, { detached: true, stdio: ["ignore", out, out], env: { ...process.env, FLEXAMEM_THREADS: "1" } });
    closeSync(out);
    this.proc = proc;
    live.add(proc);
    let exited = false;
    proc.once("exit", () => {
      exited = true;
      live.delete(proc);
    });
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline && !exited) {
      try {
        if ((await fetch(`${this.url}/health`, { signal: AbortSignal.timeout(2000) })).ok) return this;
      } catch {
        // not up yet
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    await this.kill();
    throw new Error(`the server did not start: ${readFileSync(this.log, "utf8").slice(-2000)}`);
  }

  /** kill -9 of the server and every process it started; resolves once it has exited. */
  async kill(): Promise<void> {
    await this.#end("SIGKILL", 30_000);
  }

  /** SIGTERM to the server and its processes (kill -9 after 30 s). */
  async stop(): Promise<void> {
    if (!(await this.#end("SIGTERM", 30_000))) await this.kill();
  }

  async #end(signal: NodeJS.Signals, waitMs: number): Promise<boolean> {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return true;
    const exited = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), waitMs);
      proc.once("exit", () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    killGroup(proc, signal);
    const done = await exited;
    if (done && signal === "SIGKILL") killGroup(proc, "SIGKILL"); // a worker that outlived its parent
    return done;
  }
}

/** A started SQLite server (or one on `db`) with a key for tenant "acme". */
export async function startServer(options: { db?: string; workers?: number } = {}): Promise<{ server: ServerProcess; key: string; dir: string }> {
  const dir = tempDir();
  const keyfile = join(dir, "keys.json");
  const key = addKey(keyfile, "acme");
  const server = await (await ServerProcess.create(options.db ?? join(dir, "m.db"), keyfile, join(dir, "server.log"), options.workers)).start();
  return { server, key, dir };
}

/** Keys sorted at every level: two values equal as data give the same text. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}
