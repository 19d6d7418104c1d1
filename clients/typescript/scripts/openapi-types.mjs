// TypeScript types for the server's HTTP API, written from docs/openapi.json (scripts/openapi.py writes that).
//
//   node scripts/openapi-types.mjs          # rewrite src/openapi.ts
//   node scripts/openapi-types.mjs --check  # exit 1 when src/openapi.ts is not what the document gives
//
// One interface per schema of the document, and `Routes`: for every route its path, query and header
// parameters, its JSON body and its answer. The client names each route it calls by its key in `Routes`,
// so a route or field that changes in the document and not in the client (or the other way round) fails
// `tsc`, and `test/openapi.test.ts` fails when this file is stale or a route is neither called nor listed
// as left out. Plain JavaScript on purpose: it runs before anything is compiled.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const DOCUMENT = join(here, "..", "..", "..", "docs", "openapi.json");
export const OUTPUT = join(here, "..", "src", "openapi.ts");
const METHODS = ["get", "post", "put", "patch", "delete"];

const refName = (ref) => ref.split("/").pop();
const key = (name) => (/^[A-Za-z_$][\w$]*$/.test(name) ? name : JSON.stringify(name));

/** The TypeScript type of a JSON schema. */
function typeOf(s) {
  if (s === true || s === undefined || Object.keys(s).length === 0) return "unknown";
  if (s.$ref) return refName(s.$ref);
  if (s.enum) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (s.anyOf || s.oneOf) return (s.anyOf || s.oneOf).map(typeOf).join(" | ");
  switch (s.type) {
    case "string":
      return "string";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array":
      if (s.prefixItems) return `[${s.prefixItems.map(typeOf).join(", ")}]`;
      return `Array<${typeOf(s.items)}>`;
    case "object":
      if (s.properties) return `{ ${fields(s, false).join(" ")} }`;
      if (s.additionalProperties && s.additionalProperties !== true) {
        return `Record<string, ${typeOf(s.additionalProperties)}>`;
      }
      return "Record<string, unknown>";
    default:
      return "unknown";
  }
}

/** `name: type;` for each property. What a request may leave out is optional; an answer's defaulted
 * fields are always sent (the server serialises defaults), so they are not. */
function fields(schema, request) {
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(([name, prop]) => {
    const optional = !required.has(name) && (request || !("default" in prop));
    return `${key(name)}${optional ? "?" : ""}: ${typeOf(prop)};`;
  });
}

/** The schemas a request body reaches (its own, and those they refer to). */
function requestSchemas(doc) {
  const found = new Set();
  const visit = (s) => {
    if (Array.isArray(s)) return s.forEach(visit);
    if (!s || typeof s !== "object") return;
    if (s.$ref) {
      const name = refName(s.$ref);
      if (!found.has(name)) {
        found.add(name);
        visit(doc.components.schemas[name]);
      }
    }
    Object.values(s).forEach(visit);
  };
  for (const ops of Object.values(doc.paths)) {
    for (const op of Object.values(ops)) visit(op.requestBody);
  }
  return found;
}

function params(op, where) {
  const list = (op.parameters || []).filter((p) => p.in === where);
  const inner = list.map((p) => `${key(p.name)}${p.required ? "" : "?"}: ${typeOf(p.schema)};`);
  return inner.length ? `{ ${inner.join(" ")} }` : "{}";
}

function answer(op) {
  const ok = op.responses["200"] || op.responses["201"];
  const json = ok && ok.content && ok.content["application/json"];
  return json ? typeOf(json.schema) : "string"; // no JSON schema: a text download (export)
}

/** The text of src/openapi.ts for the OpenAPI document `doc`. */
export function generate(doc) {
  const requests = requestSchemas(doc);
  const out = [
    "// Written by scripts/openapi-types.mjs from docs/openapi.json: do not edit (npm run openapi).",
    `// ${doc.info.title} ${doc.info.version}`,
    "/* eslint-disable */",
    "",
  ];
  for (const name of Object.keys(doc.components.schemas).sort()) {
    const schema = doc.components.schemas[name];
    out.push(`export interface ${name} {`);
    for (const line of fields(schema, requests.has(name))) out.push(`  ${line}`);
    out.push("}", "");
  }
  out.push("/** Every route of the server: `METHOD /path` to its parameters, JSON body and answer. */");
  out.push("export interface Routes {");
  for (const path of Object.keys(doc.paths).sort()) {
    for (const method of METHODS) {
      const op = doc.paths[path][method];
      if (!op) continue;
      const body = op.requestBody ? typeOf(op.requestBody.content["application/json"].schema) : "undefined";
      out.push(`  ${JSON.stringify(`${method.toUpperCase()} ${path}`)}: {`);
      out.push(`    path: ${params(op, "path")};`);
      out.push(`    query: ${params(op, "query")};`);
      out.push(`    headers: ${params(op, "header")};`);
      out.push(`    body: ${body};`);
      out.push(`    answer: ${answer(op)};`);
      out.push("  };");
    }
  }
  out.push("}", "");
  return out.join("\n");
}

export function documentRoutes(doc) {
  return Object.entries(doc.paths).flatMap(([path, ops]) =>
    METHODS.filter((m) => ops[m]).map((m) => `${m.toUpperCase()} ${path}`),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = generate(JSON.parse(readFileSync(DOCUMENT, "utf8")));
  if (process.argv.includes("--check")) {
    if (readFileSync(OUTPUT, "utf8") !== text) {
      console.error("src/openapi.ts is stale: run npm run openapi");
      process.exit(1);
    }
  } else {
    writeFileSync(OUTPUT, text);
    console.log(`wrote ${OUTPUT}`);
  }
}
