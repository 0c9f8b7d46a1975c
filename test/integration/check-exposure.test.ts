// `keybroker check --exposure` (docs/spec.md §20, decision 120): a project .env the rules read, a file:
// secret outside the home and a broker started by a shell that exported the key are each listed
// with a fix (exit 1), never with a value; once the keys live in the home and the broker is
// restarted from a shell without them, only the home's own files remain (exit 0).
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { baseEnv, CLI, cli, findSecrets, outputs, tempHome, writeConfig } from "../helpers/broker.js";
import { uniqueSecret } from "../helpers/environ.js";

const OPENAI = uniqueSecret("sk-real-exposure-");
const GITHUB = uniqueSecret("ghp_exposure");
const FILE_SECRET = uniqueSecret("file-secret-");
const started: ChildProcess[] = [];

afterAll(async () => {
  for (const child of started) {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = once(child, "exit");
      // The shell and its broker: their own process group, led by the shell.
      process.kill(-child.pid!, "SIGTERM");
      await exited;
    }
  }
  // The keys sit in the home's .env on purpose: only what keybroker printed is scanned.
  expect(findSecrets([OPENAI, GITHUB, FILE_SECRET], [], outputs)).toEqual([]);
});

function rules(tokenFile: string): string {
  return `version: 1
providers:
  openai:
    credentials: [OPENAI_API_KEY]
  github:
    hosts: [api.github.com]
    inject: { basic: { username: x-access-token } }
    placeholder: { env: GITHUB_TOKEN }
    credentials: ["dotenv:GITHUB_TOKEN"]
  internal:
    hosts: [api.internal.test]
    inject: { header: authorization, format: "Bearer {secret}" }
    credentials: ["file:${tokenFile}"]
`;
}

/** `sh -c 'keybroker start …'` as a user's shell runs it: the shell is the broker's parent. */
async function startFromShell(
  home: string,
  project: string,
  env: Record<string, string>,
): Promise<{ pid: number; shell: number }> {
  // `; exit $?` keeps the shell from exec-ing node in its place.
  const command = `"${process.execPath}" "${CLI}" start --home "${home}" --port 0; exit $?`;
  const child = spawn("sh", ["-c", command], {
    cwd: project,
    env: baseEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  started.push(child);
  let out = "";
  child.stderr!.on("data", (d: Buffer) => outputs.push(d.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("listening on")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`broker exited with ${code}: ${out}`)));
  });
  outputs.push(out);
  // The broker records its own pid in the home (core/broker-records.ts).
  const [record] = readdirSync(join(home, "run")).filter((n) => n.startsWith("broker-"));
  const { pid } = JSON.parse(readFileSync(join(home, "run", record!), "utf8")) as { pid: number };
  return { pid, shell: child.pid! };
}

describe("keybroker check --exposure", () => {
  it("lists each secret a same-user agent can read, with its fix, and no value", async () => {
    const home = tempHome();
    const project = tempHome();
    expect(cli(["init", "--home", home]).status).toBe(0);
    const tokenFile = join(project, "internal.token");
    writeFileSync(tokenFile, `${FILE_SECRET}\n`, { mode: 0o600 });
    writeFileSync(join(project, ".env"), `GITHUB_TOKEN=${GITHUB}\n`, { mode: 0o600 });
    writeConfig(project, rules(tokenFile));

    const broker = await startFromShell(home, project, { OPENAI_API_KEY: OPENAI });
    const before = cli(["check", "--exposure", "--home", home], { cwd: project });
    expect(before.status, before.stderr).toBe(1);
    const homeEnv = join(home, ".env");
    expect(before.stdout).toContain(
      `exposed: ${join(project, ".env")} — a .env file the rules read keys from\n`,
    );
    expect(before.stdout).toContain(`  fix: move its keys to ${homeEnv} and delete it`);
    expect(before.stdout).toContain(`exposed: ${tokenFile} — a secret named by a file: reference\n`);
    expect(before.stdout).toContain(
      `  fix: move it into the home (for example ${join(home, "secrets", "NAME")}`,
    );
    expect(before.stdout).toContain(
      `exposed: pid ${broker.shell} (sh), which started broker pid ${broker.pid} (http://127.0.0.1:`,
    );
    expect(before.stdout).toContain("— OPENAI_API_KEY in its environment\n");
    expect(before.stdout).toContain(
      `  fix: the keys were exported to the broker: keep them in ${homeEnv} instead`,
    );
    // The broker itself holds nothing in its environment (decision 119).
    expect(before.stdout).not.toContain("in its own environment");
    expect(before.stdout).toContain(`readable: ${join(home, "ca", "ca-key.pem")} — the CA key`);
    expect(before.stdout).toContain(`readable: ${join(home, "admin.token")} — the admin token`);
    expect(before.stdout).toContain("3 exposed outside the home");

    // --json says the same.
    const json = cli(["check", "--exposure", "--json", "--home", home], { cwd: project });
    expect(json.status).toBe(1);
    const report = JSON.parse(json.stdout) as { items: { what: string; exposed: boolean }[] };
    expect(report.items.filter((i) => i.exposed).map((i) => i.what)).toEqual([
      expect.stringContaining(`which started broker pid ${broker.pid}`),
      join(project, ".env"),
      tokenFile,
    ]);

    // The shell check runs in, exporting the key, is listed too.
    const shell = cli(["check", "--exposure", "--home", home], {
      cwd: project,
      env: { OPENAI_API_KEY: OPENAI },
    });
    expect(shell.stdout).toContain(
      "exposed: this shell (the environment keybroker check runs in) — OPENAI_API_KEY\n",
    );

    // The fixes: the keys in the home's .env, the file in the home, the broker restarted from a
    // shell without the key.
    writeFileSync(homeEnv, `OPENAI_API_KEY=${OPENAI}\nGITHUB_TOKEN=${GITHUB}\n`, { mode: 0o600 });
    rmSync(join(project, ".env"));
    mkdirSync(join(home, "secrets"), { mode: 0o700 });
    const moved = join(home, "secrets", "internal.token");
    renameSync(tokenFile, moved);
    writeConfig(project, rules(moved));
    expect(cli(["stop", "--home", home]).status).toBe(0);
    const again = await startFromShell(home, project, {});
    const after = cli(["check", "--exposure", "--home", home], { cwd: project });
    expect(after.status, after.stdout).toBe(0);
    expect(after.stdout).not.toContain("exposed:");
    expect(after.stdout).not.toContain(`broker pid ${again.pid}`);
    expect(after.stdout).toContain(`readable: ${homeEnv} — a .env file the rules read keys from\n`);
    expect(after.stdout).toContain(`readable: ${moved} — a secret named by a file: reference\n`);
    expect(after.stdout).toContain(
      "  fix: any process of your user can read it: run agents with keybroker run --isolate",
    );
    expect(after.stdout).toContain("nothing exposed outside the home");
    // The restarted broker found the key in the home's .env.
    const status = cli(["status", "--home", home], { cwd: project });
    expect(status.stdout).toMatch(/openai.*OPENAI_API_KEY.*dotenv/s);
  }, 90_000);
});
