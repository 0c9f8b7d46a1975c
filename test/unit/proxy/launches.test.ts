import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { Launches, type LaunchInfo } from "../../../proxy/launches.js";
import { processStart } from "../../../proxy/process-start.js";
import type { ClientState, Runtime } from "../../../proxy/runtime.js";
import type { ClientRule } from "../../../rules/types.js";

/** Just what Launches reads from a runtime: its clients. */
function runtime(rules: ClientRule[]): Runtime {
  return {
    clients: new Map(rules.map((rule) => [rule.name, { rule, token: undefined } as ClientState])),
  } as unknown as Runtime;
}

describe("Launches", () => {
  it("authenticates a launch with its own token as its client, never above the role user", () => {
    const launches = new Launches();
    const rt = runtime([{ name: "boss", providers: "*", role: "owner" }]);
    const l = launches.mint("boss", "claude --resume");
    const state = launches.authenticate(rt, `launch-${l.id}`, l.token);
    expect(state?.rule.name).toBe("boss");
    expect(state?.rule.role).toBe("user");
    expect(state?.launch).toEqual({
      id: l.id,
      client: "boss",
      command: "claude --resume",
      startedAt: l.startedAt,
    });
  });

  it("keeps a guest a guest", () => {
    const launches = new Launches();
    const rt = runtime([{ name: "visitor", providers: ["github"], role: "guest" }]);
    const l = launches.mint("visitor", "sh");
    expect(launches.authenticate(rt, `launch-${l.id}`, l.token)?.rule.role).toBe("guest");
  });

  it("refuses a wrong token, and the right one once the launch is revoked; other users are not its business", () => {
    const launches = new Launches();
    const rt = runtime([{ name: "default", providers: "*", role: "user" }]);
    const l = launches.mint("default", "sh");
    expect(launches.authenticate(rt, `launch-${l.id}`, `${l.token}x`)).toBeNull();
    expect(launches.authenticate(rt, `launch-${l.id}`, undefined)).toBeNull();
    expect(launches.authenticate(rt, "default", undefined)).toBeUndefined();
    expect(launches.revoke(l.id)?.id).toBe(l.id);
    expect(launches.authenticate(rt, `launch-${l.id}`, l.token)).toBeNull();
    expect(launches.state(rt, l.id)).toBeUndefined();
    expect(launches.list()).toEqual([]);
  });

  it("follows a reload: a client gone from the new rules ends the launch's access", () => {
    const launches = new Launches();
    const l = launches.mint("cron", "job");
    expect(
      launches.authenticate(
        runtime([{ name: "cron", providers: "*", role: "user" }]),
        `launch-${l.id}`,
        l.token,
      ),
    ).not.toBeNull();
    expect(launches.authenticate(runtime([]), `launch-${l.id}`, l.token)).toBeNull();
  });

  it("ends a launch once its run process is gone, and tells who audits it (decision 136)", async () => {
    const launches = new Launches();
    const rt = runtime([{ name: "default", providers: "*", role: "user" }]);
    const run = spawn("sleep", ["600"], { stdio: "ignore" });
    await once(run, "spawn");
    const pid = run.pid!;
    const l = launches.mint("default", "sh", { pid, start: processStart(pid)! });
    const gone = new Promise<LaunchInfo>((resolve) => {
      launches.onGone = resolve;
    });
    expect(launches.authenticate(rt, `launch-${l.id}`, l.token)).not.toBeNull();
    run.kill("SIGKILL");
    expect((await gone).id).toBe(l.id);
    expect(launches.list()).toEqual([]);
    expect(launches.authenticate(rt, `launch-${l.id}`, l.token)).toBeNull();
    launches.close();
  });
});
