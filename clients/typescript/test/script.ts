// test/script.json run through the TypeScript client (test/local_script.py runs it on a local Python
// Memory): every answer in the shape the Python runner prints, to compare the two byte for byte.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type AgentSession, type Erasure, Memory, type Mode, type Note } from "../src/index.js";
import { PACKAGE, canonical, python } from "./servers.js";

export type Step = Record<string, any> & { name: string; op: string };
export const SCRIPT: Step[] = JSON.parse(readFileSync(join(PACKAGE, "test", "script.json"), "utf8"));

const unsalted = (n: Note) => ({ exact: Object.fromEntries(Object.entries(n.exact).filter(([k]) => k !== "digest")), raw: n.raw });
const erasure = ({ at, digest, ...rest }: Erasure) => rest;
const agentJson = (a: AgentSession) => ({ session_id: a.sessionId, task: a.task, system: a.system, budget: a.budget, steps: a.stepCount });

/** `before`: something to do before the step of that name (kill a server...). */
export async function runScript(
  mem: Memory,
  before: Record<string, () => Promise<void>> = {},
  script: Step[] = SCRIPT,
): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  let agent: AgentSession | undefined;
  for (const s of script) {
    await before[s.name]?.();
    let value: unknown;
    switch (s.op) {
      case "addSession":
        value = await mem.addSession(s.turns, { sessionId: s.session_id, date: s.date });
        break;
      case "addMessages":
        value = await mem.addMessages(s.messages, { sessionId: s.session_id, date: s.date });
        break;
      case "addSessions":
        value = await mem.addSessions(s.sessions);
        break;
      case "render":
        value = await mem.render(s.query, s.budget, { mode: s.mode as Mode | undefined, prompt: s.prompt, order: s.order });
        break;
      case "search":
        value = await mem.search(s.query, { mode: s.mode, limit: s.limit });
        break;
      case "notes":
        value = (await mem.notes({ start: s.start, stop: s.stop })).map(unsalted);
        break;
      case "note":
        value = unsalted(await mem.note(s.unit));
        break;
      case "agent":
        agent = await mem.agent({ task: s.task, budget: s.budget, system: s.system, sessionId: s.session_id });
        value = agentJson(agent);
        break;
      case "resume":
        agent = await mem.agent({ sessionId: s.session_id });
        value = agentJson(agent);
        break;
      case "step":
        value = await agent!.step(s.action, s.observation);
        break;
      case "context":
        value = await agent!.context({ mode: s.mode });
        break;
      case "sessions":
        value = await mem.sessions();
        break;
      case "count":
        value = await mem.count();
        break;
      case "verify":
        value = await mem.verify();
        break;
      case "erase":
        value = erasure(await mem.erase({ turn: s.turn, reason: s.reason }));
        break;
      case "erasures":
        value = (await mem.erasures()).map(erasure);
        break;
      case "dropSession":
        value = await mem.dropSession(s.session_id);
        break;
      default:
        throw new Error(`unknown op ${s.op}`);
    }
    out[s.name] = value;
  }
  return out;
}

/** The same script on a local SQLite Memory of the Python library, each answer as canonical JSON. */
export function localAnswers(db: string, script: Step[] = SCRIPT): Record<string, string> {
  const out = JSON.parse(python([join(PACKAGE, "test", "local_script.py"), db], JSON.stringify(script)));
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, canonical(v)]));
}

