import { X509Certificate } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { formatStatus, providerStatuses, type StatusReport } from "../../admin/status.js";
import { CA_CERT_FILE, CA_DIR } from "../../certs/ca.js";
import { VERSION } from "../../core/version.js";
import { Runtime } from "../../proxy/runtime.js";
import { readPoolState } from "../../secrets/pool.js";
import { readLogins } from "../../state/tokens/home.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse } from "../args.js";
import type { Command } from "../command.js";
import { warnNotBrokersRules } from "../config-flag.js";
import {
  brokerPort,
  type Context,
  createContext,
  findRunningBrokers,
  localResolver,
  type RunningBroker,
} from "../context.js";
import { notOnPort } from "../port-probe.js";
import { readRules } from "../read-rules.js";

/** `status` when no broker of the home runs (docs/spec.md §10). */
export const EXIT_NOT_RUNNING = 3;

export const status: Command = {
  name: "status",
  help: `Usage: keybroker status [--json] [--port N] [--config FILE] [--home DIR]

Shows every broker running for this home: its version, address, pid, uptime, CA fingerprint,
whether its last reload was rejected (it then runs the previous rules), and for each provider
its credentials: id, source, fingerprint (never the value), state (ok, usage_limit_reached,
invalid, missing), reset time and request count. Without a running broker it resolves the
credentials here and shows the saved pool state. It never creates the home or the CA.

  --json           machine-readable output: the report of the broker (the only one, the one on
                   --port, else the first), with "brokers" listing every running one
  --port N         only the broker on this port

Exit status: 0 when a broker runs, 3 when none runs (or none on --port), 1 or 2 on errors.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { json: { type: "boolean" }, port: { type: "string" } });
    const port = brokerPort(values.port);
    const ctx = createContext(values);
    const all = await findRunningBrokers(ctx.home);
    const running = all.filter((b) => port === undefined || b.port === port);
    // `--port` names the wrong one: say who answers there and where this home's brokers are.
    if (running.length === 0 && port !== undefined)
      ctx.err(`keybroker status: ${await notOnPort(ctx.home, port, all)}`);
    for (const b of running) warnNotBrokersRules(ctx, "status", values.config, b);
    const reports =
      running.length > 0
        ? await Promise.all(running.map((b) => adminRequest<StatusReport>(ctx.home, b, "GET", "status")))
        : [await savedState(ctx, values.config)];
    if (values.json) {
      ctx.out(JSON.stringify({ ...reports[0], brokers: running.map(summary) }, null, 2));
    } else {
      const head = running.length > 1 ? [`${running.length} brokers run for this home`, ""] : [];
      ctx.out([...head, reports.map(formatStatus).join("\n\n")].join("\n"));
    }
    return running.length > 0 ? 0 : EXIT_NOT_RUNNING;
  },
};

function summary(b: RunningBroker) {
  return { url: b.url, port: b.port, pid: b.pid, version: b.version, rules: b.rules, startedAt: b.startedAt };
}

/** What status shows with no broker running: resolved here, read-only (no home, CA or key made). */
async function savedState(ctx: Context, config: string | undefined): Promise<StatusReport> {
  const { rules } = readRules(ctx, config);
  // Placeholders are not shown: a throwaway key keeps the home's own key from being created.
  const rt = await Runtime.build(rules, localResolver(ctx, rules), Buffer.alloc(32));
  const logins = await readLogins(ctx.home);
  const caPath = join(ctx.home, CA_DIR, CA_CERT_FILE);
  return {
    running: false,
    version: VERSION,
    url: undefined,
    pid: undefined,
    ca: existsSync(caPath)
      ? { path: caPath, fingerprint: new X509Certificate(readFileSync(caPath)).fingerprint256 }
      : undefined,
    rules: rules.origin,
    missingHome: existsSync(ctx.home) ? undefined : ctx.home,
    providers: providerStatuses(rt, readPoolState(ctx.home), (id) => logins.filter((l) => l.provider === id)),
  };
}
