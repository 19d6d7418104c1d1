// The client's types and routes stay in step with the server's OpenAPI document. src/openapi.ts is
// written from docs/openapi.json (scripts/openapi-types.mjs) and every call of the client names its route
// by a key of its `Routes`, so tsc refuses a body, parameter or answer field the document lacks. Here:
// the file is what the document gives today (and what the server's code gives, should docs/openapi.json
// be stale), and every route of the document is called by the client or left out on purpose, by name.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { PACKAGE, ROOT, python } from "./servers.js";

interface Generator {
  generate(doc: unknown): string;
  documentRoutes(doc: unknown): string[];
  DOCUMENT: string;
  OUTPUT: string;
}
const generator = (await import(pathToFileURL(join(PACKAGE, "scripts", "openapi-types.mjs")).href)) as Generator;

/** Routes the client does not call, and why. */
const LEFT_OUT: Record<string, string> = {
  "GET /health": "liveness, for load balancers",
  "GET /v1/histories/{history}/notes": "the client reads notes in full (notes-full)",
  "POST /v1/histories/{history}/inspect-link": "a link for a person's browser, not an API call",
};

test("src/openapi.ts is what docs/openapi.json gives (npm run openapi rewrites it)", () => {
  const doc = JSON.parse(readFileSync(generator.DOCUMENT, "utf8"));
  assert.equal(readFileSync(generator.OUTPUT, "utf8"), generator.generate(doc));
});

test("and what the server's code gives (docs/openapi.json is current: python scripts/openapi.py)", () => {
  const code = `import sys; sys.path.insert(0, ${JSON.stringify(join(ROOT, "scripts"))}); from openapi import spec; print(spec(), end="")`;
  const live = JSON.parse(python(["-c", code]));
  assert.equal(readFileSync(generator.OUTPUT, "utf8"), generator.generate(live));
});

test("every route of the document is called by the client or left out by name, and no other", () => {
  const doc = JSON.parse(readFileSync(generator.DOCUMENT, "utf8"));
  const documented = new Set(generator.documentRoutes(doc));
  const source = readFileSync(join(PACKAGE, "src", "memory.ts"), "utf8");
  const called = new Set([...source.matchAll(/route: "([A-Z]+ [^"]+)"/g)].map((m) => m[1]!));
  assert.ok(called.size >= 20);
  for (const route of called) assert.ok(documented.has(route), `the client calls ${route}, which the server lacks`);
  for (const route of Object.keys(LEFT_OUT)) {
    assert.ok(documented.has(route) && !called.has(route), `${route} is listed as left out`);
  }
  const uncovered = [...documented].filter((r) => !called.has(r) && !(r in LEFT_OUT));
  assert.deepEqual(uncovered, [], "routes the TypeScript client neither calls nor lists in LEFT_OUT");
});
