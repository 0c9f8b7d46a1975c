import { basename } from "node:path";
import { type AuditChain, auditDir } from "../../audit/audit-log.js";
import { AuditFollower, formatAuditLine, lastAuditLines } from "../../audit/audit-tail.js";
import { verifyAudit } from "../../audit/audit-verify.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { refuseConfig } from "../config-flag.js";
import { type Context, createContext } from "../context.js";

const DEFAULT_LINES = 10;
/** `audit verify`: both chains intact, but one records events lost to a failed write. */
export const EXIT_AUDIT_GAP = 4;

export const audit: Command = {
  name: "audit",
  help: `Usage: keybroker audit verify [--json] [--home DIR]
       keybroker audit tail [-f] [--json] [-n N] [--security] [--home DIR]

The audit log is $KEYBROKER_HOME/audit/audit.jsonl (0600, folder 0700): one JSON line per
decision (injected, passthrough, blocked, retried, marked, refreshed, reauth_required, login,
reset, reload, gap, ...) with the client, provider, credential id and fingerprint (never the
value), request, status, bytes and duration. Each line carries the hash of the line before it.
Files are rotated at 10 MiB (audit.1.jsonl is the newest rotated file, 5 are kept), the chain
carried across files. The events that matter after the fact (blocked, login, removed, reset,
reload, approvals, admin logins) are also in security.jsonl, a chain rotated on its own that
ordinary traffic cannot rotate away. A write that failed (disk full) is followed, once writing
resumes, by a gap line: how many events were lost, and the first and last time.

  verify          checks every line of both chains, oldest file first: a changed line no longer
                  matches its hash; a removed, inserted or reordered line breaks the link of the
                  line after it. Exit 0 when intact, 1 naming the first bad line, ${EXIT_AUDIT_GAP} when
                  intact but a gap line records lost events (each gap is listed).
    --json          one JSON object: ok, exitCode, and per chain (audit, security) ok, lines,
                    files, fromGenesis, gaps, or for a broken chain ok: false with file, line
                    and problem (same exit codes)
  tail            the last lines, one readable line each: time, decision, client → provider,
                  method host path, status
    -n, --lines N   how many lines to show first (default ${DEFAULT_LINES}; 0 for none)
    -f, --follow    keep printing new lines as they are written, across rotation (Ctrl-C stops)
    --json          print the raw JSON lines instead
    --security      the security chain (security.jsonl) instead of audit.jsonl

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(
      argv,
      {
        follow: { type: "boolean", short: "f" },
        json: { type: "boolean" },
        lines: { type: "string", short: "n" },
        security: { type: "boolean" },
      },
      true,
    );
    const [action, ...extra] = positionals;
    if (action === undefined) throw new UsageError("say which: audit verify, or audit tail");
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
    refuseConfig(values.config, "audit", "the audit log is the home's (<home>/audit/), whatever the rules");
    const ctx = createContext(values);
    if (action === "verify") {
      for (const flag of ["follow", "lines", "security"] as const) {
        if (values[flag] !== undefined)
          throw new UsageError(`--${flag} is an option of audit tail, not verify`);
      }
      return verify(ctx, values.json === true);
    }
    if (action !== "tail") throw new UsageError(`unknown action "${action}": use verify or tail`);
    let count = DEFAULT_LINES;
    if (values.lines !== undefined) {
      if (!/^[0-9]+$/.test(values.lines))
        throw new UsageError(`-n needs a whole number, not "${values.lines}"`);
      count = Number(values.lines);
    }
    const print = values.json === true ? (line: string) => line : formatAuditLine;
    const chain: AuditChain = values.security === true ? "security" : "audit";
    if (values.follow !== true) {
      for (const line of await lastAuditLines(ctx.home, count, chain)) ctx.out(print(line));
      return 0;
    }
    return follow(ctx, count, print, chain);
  },
};

async function verify(ctx: Context, json: boolean): Promise<number> {
  const results = {
    audit: await verifyAudit(ctx.home, "audit"),
    security: await verifyAudit(ctx.home, "security"),
  };
  const all = Object.values(results);
  const status = all.some((r) => !r.ok) ? 1 : all.some((r) => r.ok && r.gaps.length > 0) ? EXIT_AUDIT_GAP : 0;
  if (json) {
    ctx.out(JSON.stringify({ ok: status === 0, exitCode: status, ...results }, null, 2));
    return status;
  }
  for (const [chain, result] of Object.entries(results)) {
    if (!result.ok) {
      ctx.err(
        `${chain} log broken at ${basename(result.file)} line ${result.line}: ${result.problem}\n` +
          `(${result.lines} line(s) before it verified; files in ${auditDir(ctx.home)})`,
      );
      continue;
    }
    if (result.files.length === 0) {
      ctx.out(`${chain} log intact: 0 lines (no ${chain} file yet in ${auditDir(ctx.home)})`);
      continue;
    }
    ctx.out(
      `${chain} log intact: ${result.lines} line(s) in ${result.files.length} file(s) (${result.files.map((f) => basename(f)).join(", ")})`,
    );
    if (!result.fromGenesis) {
      ctx.out(`note: the oldest kept ${chain} line continues a file that rotation has removed`);
    }
    if (result.gaps.length > 0) {
      const lost = result.gaps.reduce((n, g) => n + g.lost, 0);
      ctx.out(`${chain} log records ${result.gaps.length} gap(s): ${lost} event(s) lost to failed writes`);
      for (const g of result.gaps) {
        ctx.out(
          `  gap at ${basename(g.file)} line ${g.line}: ${g.lost} event(s) from ${g.first ?? "?"} to ${g.last ?? "?"}${g.reason ? ` (${g.reason})` : ""}`,
        );
      }
    }
  }
  return status;
}

async function follow(
  ctx: Context,
  count: number,
  print: (line: string) => string,
  name: AuditChain,
): Promise<number> {
  let closed = false;
  const follower = new AuditFollower(ctx.home, {
    last: count,
    name,
    onLine: (line) => {
      if (!closed) process.stdout.write(print(line) + "\n");
    },
  });
  const done = new Promise<void>((resolve) => {
    const stop = () => {
      closed = true;
      resolve();
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    // The reader went away (`| head`): stop quietly.
    process.stdout.on("error", stop);
  });
  await follower.start();
  await done;
  await follower.stop();
  return 0;
}
