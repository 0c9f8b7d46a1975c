// `keybroker check --exposure`: what another process of the user (an agent not run with
// --isolate) could read now, and how to close each. Names files, processes and variable names,
// never a value. What counts as exposed (exit 1) is decided in docs/decisions.md, 120: a secret
// in a process environment, or a secret file outside the home.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve, sep } from "node:path";
import { CA_DIR, CA_KEY_FILE } from "../certs/ca.js";
import { readBrokerRecords } from "../core/broker-records.js";
import { parseRef } from "../rules/credential-ref.js";
import { secretRefs } from "../rules/secret-variables.js";
import type { Rules } from "../rules/types.js";
import { dotenvCandidates } from "../secrets/sources.js";
import type { Context } from "./context.js";
import { secretHoldingVariables } from "./hide-environ.js";

export interface ExposureItem {
  /** A path, or a process: `broker pid 123 (http://127.0.0.1:8899)`, `pid 99 (bash)`. */
  readonly what: string;
  /** What it gives away, in words (variable names at most). */
  readonly holds: string;
  readonly fix: string;
  /** True for what decision 120 counts as exposed (exit 1); false for the home's files. */
  readonly exposed: boolean;
}

export interface ExposureReport {
  readonly items: ExposureItem[];
  /** What could not be looked at, and why. */
  readonly notes: string[];
}

const ISOLATE_FIX =
  "any process of your user can read it: run agents with keybroker run --isolate (Linux), as another OS user, or in a container that does not mount the home";

function inside(path: string, dir: string): boolean {
  return resolve(path).startsWith(resolve(dir) + sep);
}

/** Names in a NUL-separated environment block that have a non-empty value. */
function namesWithValues(block: string): Set<string> {
  const names = new Set<string>();
  for (const entry of block.split("\0")) {
    const eq = entry.indexOf("=");
    if (eq > 0 && eq < entry.length - 1) names.add(entry.slice(0, eq));
  }
  return names;
}

function processInfo(pid: number): { ppid: number; comm: string; environ: Set<string> } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    return { ppid, comm, environ: namesWithValues(readFileSync(`/proc/${pid}/environ`, "latin1")) };
  } catch {
    return undefined; // gone, or another user's
  }
}

function held(environ: Set<string>, secretNames: ReadonlySet<string>): string[] {
  return [...environ].filter((n) => secretNames.has(n)).sort();
}

function processItems(ctx: Context, secretNames: ReadonlySet<string>, report: ExposureReport): void {
  const homeEnv = join(ctx.home, ".env");
  const own = held(new Set(Object.keys(ctx.env).filter((k) => (ctx.env[k] ?? "") !== "")), secretNames);
  if (own.length > 0) {
    report.items.push({
      what: "this shell (the environment keybroker check runs in)",
      holds: own.join(", "),
      fix: `every program started from this shell gets them: stop exporting them and keep them in ${homeEnv} (keybroker run removes them from its command, an agent started directly does not)`,
      exposed: true,
    });
  }
  const brokers = readBrokerRecords(ctx.home);
  if (brokers.length === 0) return;
  if (!existsSync("/proc/self/environ")) {
    report.notes.push(`the running brokers' environments: not checked (no /proc on ${process.platform})`);
    return;
  }
  const seen = new Set<number>();
  for (const broker of brokers) {
    const name = `broker pid ${broker.pid} (${broker.url})`;
    const self = processInfo(broker.pid);
    if (self === undefined) continue;
    const mine = held(self.environ, secretNames);
    if (mine.length > 0) {
      report.items.push({
        what: name,
        holds: `${mine.join(", ")} in its own environment`,
        fix: "this broker could not blank them (an older version, or see its log): restart it with keybroker stop, then keybroker start",
        exposed: true,
      });
    }
    // The shell (and whatever started it) that handed the broker its keys keeps them.
    for (let pid = self.ppid; pid > 1 && !seen.has(pid); ) {
      seen.add(pid);
      const up = processInfo(pid);
      if (up === undefined) break;
      const theirs = held(up.environ, secretNames);
      if (theirs.length > 0) {
        report.items.push({
          what: `pid ${pid} (${up.comm}), which started ${name}`,
          holds: `${theirs.join(", ")} in its environment`,
          fix: `the keys were exported to the broker: keep them in ${homeEnv} instead, then restart the broker from a shell that does not export them`,
          exposed: true,
        });
      }
      pid = up.ppid;
    }
  }
}

function fileItems(ctx: Context, rules: Rules, report: ExposureReport): void {
  const homeEnv = join(ctx.home, ".env");
  const refs = secretRefs(rules).map(parseRef);
  const usesDotenv = rules.sources.order.includes("dotenv") || refs.some((r) => r.source === "dotenv");
  if (usesDotenv) {
    const candidates = dotenvCandidates(rules, {
      env: ctx.env,
      home: ctx.home,
      cwd: ctx.cwd,
      warn: () => {},
    });
    for (const path of candidates.filter((p) => existsSync(p))) {
      const home = inside(path, ctx.home);
      report.items.push({
        what: path,
        holds: "a .env file the rules read keys from",
        fix: home
          ? ISOLATE_FIX
          : `move its keys to ${homeEnv} and delete it (or set sources.dotenv to a file in the home): the home is the one folder to keep from agents`,
        exposed: !home,
      });
    }
  }
  const files = new Set(refs.filter((r) => r.source === "file").map((r) => resolve(ctx.cwd, r.key)));
  for (const path of [...files].filter((p) => existsSync(p))) {
    const home = inside(path, ctx.home);
    report.items.push({
      what: path,
      holds: "a secret named by a file: reference",
      fix: home
        ? ISOLATE_FIX
        : `move it into the home (for example ${join(ctx.home, "secrets", "NAME")}, mode 0600) and change the reference to file:<that path>`,
      exposed: !home,
    });
  }
}

/** The home's own secrets. */
function homeItems(ctx: Context, report: ExposureReport): void {
  const tokens = join(ctx.home, "tokens");
  const stored = (() => {
    try {
      return readdirSync(tokens, { recursive: true }).length > 0;
    } catch {
      return false;
    }
  })();
  const candidates: [string, string, boolean][] = [
    [tokens, "the token store: OAuth logins' access and refresh tokens", stored],
    [join(ctx.home, "admin.token"), "the admin token: approves held requests, resets, reloads", true],
    [join(ctx.home, "home.key"), "the home key: derives the placeholders, seals fleet data", true],
    [
      join(ctx.home, CA_DIR, CA_KEY_FILE),
      "the CA key: impersonates any HTTPS site to programs trusting the keybroker CA",
      true,
    ],
  ];
  for (const [path, holds, present] of candidates) {
    if (present && existsSync(path))
      report.items.push({ what: path, holds, fix: ISOLATE_FIX, exposed: false });
  }
}

export function findExposure(ctx: Context, rules: Rules): ExposureReport {
  const report: ExposureReport = { items: [], notes: [] };
  processItems(ctx, secretHoldingVariables(rules, []), report);
  fileItems(ctx, rules, report);
  homeItems(ctx, report);
  return report;
}

/** The report as `check --exposure` prints it. */
export function exposureLines(report: ExposureReport): string[] {
  const lines = ["what another process of your user (an agent not run with --isolate) can read now:"];
  for (const item of report.items) {
    lines.push(`${item.exposed ? "exposed" : "readable"}: ${item.what} — ${item.holds}`);
    lines.push(`  fix: ${item.fix}`);
  }
  for (const note of report.notes) lines.push(`note: ${note}`);
  const exposed = report.items.filter((i) => i.exposed).length;
  lines.push(
    exposed === 0
      ? "nothing exposed outside the home; the home's files stay readable to agents not run with --isolate"
      : `${exposed} exposed outside the home: apply the fixes above, then run keybroker check --exposure again`,
  );
  return lines;
}
