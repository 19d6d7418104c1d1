// The examples users copy run as written against a real server: the first `ts` block of
// docs/doors/typescript.md (type-checked and compiled as a user's build would) and examples/ai-sdk/chat.mjs. Each is run
// from a folder inside this package, so `import ... from "flexamem"` resolves to this package (Node's
// self-reference through "exports") and `ai` to its node_modules.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";
import ts from "typescript";
import { PACKAGE, PYTHON, ROOT, type ServerProcess, python, startServer } from "./servers.js";

const RUN = join(PACKAGE, "dist", "examples");
const run = promisify(execFile);

function blocks(page: string, lang: string): string[] {
  const text = readFileSync(join(ROOT, "docs", "doors", page), "utf8");
  return [...text.matchAll(/^```(\w+)\n([\s\S]*?)^```/gm)].filter((m) => m[1] === lang).map((m) => m[2]!);
}

describe("examples", () => {
  let server: ServerProcess;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    const started = await startServer();
    server = started.server;
    env = { ...process.env, FLEXAMEM_URL: server.url, FLEXAMEM_API_KEY: started.key };
    delete env.OPENAI_BASE_URL; // the example's stand-in model, whatever the caller's shell holds
    mkdirSync(RUN, { recursive: true });
  });
  after(() => server.stop());

  test("docs/doors/typescript.md: the client example", async () => {
    const [code] = blocks("typescript.md", "ts");
    const file = join(RUN, "typescript-md.ts"); // type-checked against the package's declarations, then run
    writeFileSync(file, code!);
    const program = ts.createProgram([file], {
      module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022,
      strict: true, types: ["node"], skipLibCheck: true, outDir: RUN, rootDir: RUN, typeRoots: [join(PACKAGE, "node_modules", "@types")],
    });
    const emitted = program.emit();
    const problems = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics];
    assert.deepEqual(problems.map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")), []);
    const { stdout } = await run(process.execPath, [join(RUN, "typescript-md.js")], { env, cwd: RUN });
    assert.match(stdout, /^true true (raw|excerpt)$/m);
    assert.match(stdout, /NotFoundError 404/);
    assert.match(stdout, /\d+ tokens in \d+ messages/);
    assert.match(stdout, /Ana: Refund the hotel to my Visa ending 4417\./);
  });

  test("examples/ai-sdk/chat.mjs: the second turn is answered from the memory", async () => {
    copyFileSync(join(ROOT, "examples", "ai-sdk", "chat.mjs"), join(RUN, "chat.mjs"));
    const { stdout } = await run(process.execPath, [join(RUN, "chat.mjs")], { env, cwd: RUN });
    assert.match(stdout, /turn 1 -> From memory: \(nothing about a card in my memory\)/);
    assert.match(stdout, /turn 2 -> From memory: user: Please refund the hotel to my Visa ending 4417\./);
    assert.match(stdout, /notes in memory: 2/);
  });
});

/** Why the project's local llama.cpp model cannot run here (null when it can). */
function noLocalModel(): string | false {
  const why = python(["-c", "from flexamem.llm.local import local_server_available as a; print(a() or '')"]).trim();
  if (!why) return false;
  if (process.env.FLEXAMEM_REQUIRE_LOCAL_LLM === "1") throw new Error(`FLEXAMEM_REQUIRE_LOCAL_LLM=1 but ${why}`);
  return why;
}

test("examples/ai-sdk/chat.mjs with a real model: the local llama.cpp server, through @ai-sdk/openai-compatible", { skip: noLocalModel() }, async () => {
  const { server, key } = await startServer();
  const code = [
    "import sys",
    "from flexamem.llm.local import LocalServer, local_model_path",
    "with LocalServer(local_model_path(), threads=2) as s:",
    "    print(s.base_url, flush=True)",
    "    sys.stdin.read()",  // until this test closes stdin
  ].join("\n");
  const llm = spawn(PYTHON, ["-c", code], { stdio: ["pipe", "pipe", "inherit"] });
  try {
    const [line] = (await once(llm.stdout!, "data")) as [Buffer];
    const env = {
      ...process.env, FLEXAMEM_URL: server.url, FLEXAMEM_API_KEY: key, OPENAI_BASE_URL: line.toString().trim(),
      FLEXAMEM_EXAMPLE_MODEL: "local", OPENAI_API_KEY: "local",
    };
    mkdirSync(RUN, { recursive: true });
    copyFileSync(join(ROOT, "examples", "ai-sdk", "chat.mjs"), join(RUN, "chat.mjs"));
    const { stdout } = await run(process.execPath, [join(RUN, "chat.mjs")], { env, cwd: RUN, timeout: 300_000 });
    const [first, second] = [...stdout.matchAll(/^\[memory: (\d+) of \d+ tokens\]$/gm)].map((m) => Number(m[1]));
    assert.equal(first, 0); // a new history: nothing to show yet
    assert.ok(second! > 0, stdout); // the first turn, recorded, shown to the second call
    assert.match(stdout, /^turn 1 -> .+/m);
    assert.match(stdout, /^turn 2 -> .+/m); // the model's own words, streamed
    assert.match(stdout, /notes in memory: 2/);
  } finally {
    llm.stdin!.end();
    await once(llm, "exit");
    await server.stop();
  }
});
