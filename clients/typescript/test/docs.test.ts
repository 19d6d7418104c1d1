// The examples users copy run as written against a real server: the first `ts` block of
// docs/doors/typescript.md (type-checked and compiled as a user's build would) and examples/ai-sdk/chat.mjs. Each is run
// from a folder inside this package, so `import ... from "flexamem"` resolves to this package (Node's
// self-reference through "exports") and `ai` to its node_modules.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";
import ts from "typescript";
import { PACKAGE, ROOT, type ServerProcess, startServer } from "./servers.js";

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
