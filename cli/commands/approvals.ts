// `keybroker approvals [--json]`, `approve <id> [--for DURATION]`, `deny <id>` (docs/spec.md §16): the
// requests `approve` rules hold in the running broker, and the answers to them.
import { UserError } from "../../core/errors.js";
import { parseDuration } from "../../rules/units.js";
import type { ApprovalView } from "../../state/approvals/store.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { warnNotBrokersRules } from "../config-flag.js";
import {
  brokerPort,
  type Context,
  createContext,
  findRunningBroker,
  type RunningBroker,
} from "../context.js";

const PORT_HELP = `  --port N         the broker on this port, when several run for the home`;

async function running(
  ctx: Context,
  portFlag: string | undefined,
  config: string | undefined,
  command: string,
): Promise<RunningBroker> {
  const port = brokerPort(portFlag);
  const broker = await findRunningBroker(ctx.home, port);
  if (broker === undefined) {
    throw new UserError(
      `no keybroker is running for ${ctx.home}${port === undefined ? "" : ` on port ${port}`}: requests wait for approval only in a running broker (keybroker start; --home names another home)`,
    );
  }
  warnNotBrokersRules(ctx, command, config, broker);
  return broker;
}

function describe(a: ApprovalView): string {
  return `${a.method} ${a.host}${a.path} (client ${a.client}, provider ${a.provider})`;
}

function table(list: readonly ApprovalView[]): string[] {
  const rows = [
    ["ID", "CLIENT", "PROVIDER", "REQUEST", "LEFT"],
    ...list.map((a) => [a.id, a.client, a.provider, `${a.method} ${a.host}${a.path}`, `${a.seconds_left} s`]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) =>
    r
      .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd(),
  );
}

export const approvals: Command = {
  name: "approvals",
  help: `Usage: keybroker approvals [--json] [--port N] [--home DIR]

Lists the requests the running broker holds because an approve rule of the rule file matched
them: id, client, provider, method, host, path and the seconds left before they are refused
(403 approval_timeout). Answer one with keybroker approve <id> or keybroker deny <id>.

  --json           a JSON array; each entry has id, client, provider, method, host, path,
                   seconds_left, held_at, expires_at and preview (the body's first 2 KiB,
                   secrets masked)
${PORT_HELP}

Exit status: 0, or 1 when no broker is running for the home.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { json: { type: "boolean" }, port: { type: "string" } });
    const ctx = createContext(values);
    const broker = await running(ctx, values.port, values.config, "approvals");
    const { approvals: list, degradedSince } = await adminRequest<{
      approvals: ApprovalView[];
      degradedSince?: string;
    }>(ctx.home, broker, "GET", "approvals");
    if (degradedSince !== undefined) {
      ctx.err(
        `warning: the fleet's Redis has not answered since ${degradedSince}: only the requests this broker holds are listed`,
      );
    }
    if (values.json) {
      ctx.out(JSON.stringify(list, null, 2));
      return 0;
    }
    if (list.length === 0) {
      ctx.out("no requests wait for approval");
      return 0;
    }
    for (const line of table(list)) ctx.out(line);
    ctx.out("");
    ctx.out("answer with: keybroker approve <id> [--for 10m]   or   keybroker deny <id>");
    return 0;
  },
};

/** Sends approve or deny for `id` to the running broker; the answered request comes back. */
async function answer(
  values: { home?: string | undefined; config?: string | undefined; port?: string | undefined },
  id: string,
  verb: "approve" | "deny",
  body: Record<string, string>,
): Promise<{ ctx: Context; approval: ApprovalView }> {
  const ctx = createContext(values);
  const broker = await running(ctx, values.port, values.config, verb);
  const { approval } = await adminRequest<{ approval: ApprovalView }>(
    ctx.home,
    broker,
    "POST",
    `approvals/${encodeURIComponent(id)}/${verb}`,
    body,
  );
  return { ctx, approval };
}

/** approve and deny: one positional id. */
function oneId(positionals: string[], verb: string): string {
  const [id, ...extra] = positionals;
  if (id === undefined)
    throw new UsageError(
      `which request? give the id that keybroker approvals shows, as in keybroker ${verb} 3f9c0a1b`,
    );
  if (extra.length > 0) throw new UsageError(`unexpected arguments: ${extra.join(" ")}`);
  return id;
}

export const approve: Command = {
  name: "approve",
  help: `Usage: keybroker approve <id> [--for DURATION] [--port N] [--home DIR]

Lets a held request through (keybroker approvals lists them). With --for, requests of the same
client to the same provider that the same approve rule matches pass without asking for that
long (10m, 1h, 90s); each of them is audited.

  --for DURATION   also approve the same client, provider and rule for this long
${PORT_HELP}

Exit status: 0, 1 when no broker runs or the id is not pending (answered, timed out, withdrawn).

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(argv, { for: { type: "string" }, port: { type: "string" } }, true);
    const id = oneId(positionals, "approve");
    let forMs: number | undefined;
    if (values.for !== undefined) {
      forMs = parseDuration(values.for);
      if (forMs === undefined || forMs <= 0)
        throw new UsageError(`--for: not a duration: ${values.for} (write 10m, 1h or 90s)`);
    }
    const { ctx, approval } = await answer(
      values,
      id,
      "approve",
      values.for === undefined ? {} : { for: values.for },
    );
    ctx.out(`approved ${approval.id}: ${describe(approval)}`);
    if (forMs !== undefined) {
      const until = new Date(Date.now() + forMs).toISOString();
      ctx.out(`the same client, provider and rule pass without asking until ${until}`);
    }
    return 0;
  },
};

export const deny: Command = {
  name: "deny",
  help: `Usage: keybroker deny <id> [--port N] [--home DIR]

Refuses a held request (keybroker approvals lists them): its client gets 403 policy_denied.

${PORT_HELP}

Exit status: 0, 1 when no broker runs or the id is not pending (answered, timed out, withdrawn).

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(argv, { port: { type: "string" } }, true);
    const id = oneId(positionals, "deny");
    const { ctx, approval } = await answer(values, id, "deny", {});
    ctx.out(`denied ${approval.id}: ${describe(approval)}`);
    return 0;
  },
};
