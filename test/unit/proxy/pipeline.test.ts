import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../../core/log.js";
import { Approvals } from "../../../proxy/approvals.js";
import type { Exchange } from "../../../proxy/exchange.js";
import {
  attemptStages,
  headStages,
  type PipelineParts,
  requestStages,
  responseStages,
  stagesFor,
} from "../../../proxy/pipeline.js";
import { FallBack } from "../../../proxy/stages/fall-back.js";
import type { Recorder } from "../../../proxy/stages/record.js";
import { ANSWER, NEXT, RESEND, type ResponseStage, runResponseStages } from "../../../proxy/stages/stage.js";
import { MemoryApprovalStore } from "../../../state/approvals/memory.js";
import { parseSnippet } from "../../helpers/rules.js";

const source = readFileSync(fileURLToPath(new URL("../../../proxy/pipeline.ts", import.meta.url)), "utf8");
/** The order comment at the top of pipeline.ts, the one place a reader learns the steps from. */
const header = source.slice(0, source.indexOf("\nimport "));

function parts(): PipelineParts {
  const log = createLogger("error", { env: {}, stream: { write: () => {} } });
  return {
    log,
    auditWritable: () => true,
    approvals: new Approvals({ onEvent: () => {}, store: new MemoryApprovalStore() }),
    agent: () => {
      throw new Error("not forwarding here");
    },
    upstream: () => {
      throw new Error("not forwarding here");
    },
    recorder: { onPoolEvent: () => {} } as unknown as Recorder,
  };
}

/** Fails unless the header names every stage, each after the one before it. */
function assertNamedInOrder(names: readonly string[]): void {
  let from = 0;
  for (const name of names) {
    const at = header.slice(from).search(new RegExp(`\\b${name}\\b`));
    if (at === -1)
      throw new Error(`pipeline.ts's order comment does not name ${name} after the stage before it`);
    from += at + name.length;
  }
}

describe("the pipeline's lists", () => {
  const p = parts();
  const lists = {
    request: requestStages(p).slice(0, -attemptStages.length),
    attempt: attemptStages,
    head: headStages,
    response: responseStages(p, new FallBack(attemptStages, p.log, p.recorder.onPoolEvent)),
  };

  it("are named, each stage in the order comment, in the order it runs", () => {
    const all = [...lists.request, ...lists.attempt, ...lists.head, ...lists.response];
    const names = all.map((s) => s.name);
    expect(names.every((n) => n !== "")).toBe(true);
    assertNamedInOrder(names);
    expect(names).toContain("refreshOn401");
    expect(names).toContain("retryNextCredential");
  });

  it("end the request list with the attempt stages a retry runs again", () => {
    expect(requestStages(p).slice(-attemptStages.length)).toEqual([...attemptStages]);
  });
});

describe("stagesFor (decision 170)", () => {
  const all = requestStages(parts());
  const names = (yaml: string) => stagesFor(all, parseSnippet(yaml)).map((s) => s.name);
  const OPTIONAL = [
    "limitClientRate",
    "canonicalizePath",
    "checkRole",
    "applyPolicy",
    "requireAudit",
    "planMcp",
    "holdForApproval",
    "checkBodyPlaceholders",
  ];
  const PLAIN = `catalogue: false
providers:
  openai:
    hosts: [api.openai.com]
    credentials: [OPENAI_API_KEY]
`;

  it("leaves out every stage a rule file without limits, guests, policy, MCP or intercept: all has no work for", () => {
    const plain = names(PLAIN);
    expect(plain.filter((n) => OPTIONAL.includes(n))).toEqual([]);
    expect(plain).toEqual(all.map((s) => s.name).filter((n) => !OPTIONAL.includes(n)));
  });

  it("keeps, in their order, the stages a rule file uses", () => {
    const used = names(`catalogue: false
intercept: all
providers:
  openai:
    hosts: [api.openai.com]
    credentials: [OPENAI_API_KEY]
    policy:
      - approve: { method: POST, path: "/v1/files" }
  docs:
    mcp: https://mcp.example.com/mcp
clients:
  default: { limits: { rpm: 10 } }
  reader: { role: guest }
audit: { require: true }
`);
    expect(used).toEqual(all.map((s) => s.name));
  });

  it("keeps only what each feature needs: a deny-only policy holds nothing for approval", () => {
    const used = names(`${PLAIN}    policy: [{ deny: { method: DELETE, path: "/**" } }]\n`);
    expect(used).toContain("applyPolicy");
    expect(used).toContain("canonicalizePath");
    expect(used).not.toContain("holdForApproval");
    expect(used).not.toContain("checkRole");
  });
});

describe("runResponseStages", () => {
  const x = {} as Exchange;
  const seen: string[] = [];
  const stage =
    (name: string, verdict: 0 | 1 | 2, async = false): ResponseStage =>
    () => {
      seen.push(name);
      return async ? Promise.resolve(verdict) : verdict;
    };

  it("stops at the first stage that decides, waiting on one that answers later", async () => {
    seen.length = 0;
    expect(await runResponseStages([stage("a", NEXT), stage("b", RESEND, true), stage("c", ANSWER)], x)).toBe(
      RESEND,
    );
    expect(seen).toEqual(["a", "b"]);
  });

  it("answers the client when no stage decides", async () => {
    seen.length = 0;
    expect(await runResponseStages([stage("a", NEXT), stage("b", NEXT, true)], x)).toBe(ANSWER);
    expect(seen).toEqual(["a", "b"]);
  });
});
