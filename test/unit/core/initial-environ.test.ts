// The programs a broker starts once it has blanked its keys (a `cmd:` source, `notify`) do not
// inherit them: their own /proc/<pid>/environ, readable by any process of the user, holds no key
// (decision 119).
import { readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { blankInitialValues, childEnvironment } from "../../../core/initial-environ.js";
import { runCommand } from "../../../secrets/cmd-source.js";

it("a cmd: program started after the blanking inherits none of the blanked variables", async () => {
  const name = `KB_TEST_SECRET_${process.pid}`;
  const value = `sk-environ-${process.pid}-${Date.now()}`;
  process.env[name] = value;
  expect(childEnvironment(process.env)[name]).toBe(value);

  blankInitialValues(new Set([name]));
  // The broker itself still reads it; a program it starts does not get it.
  expect(process.env[name]).toBe(value);
  expect(childEnvironment(process.env)[name]).toBeUndefined();
  const environ = await runCommand(["sh", "-c", "tr '\\0' '\\n' < /proc/self/environ"], {
    env: process.env,
    timeoutMs: 10_000,
  });
  expect(environ).not.toContain(value);
  expect(environ).not.toContain(`${name}=`);
  // This process's own block is not where the value came from (it was set after the exec), but
  // nothing in it names the value either.
  expect(readFileSync("/proc/self/environ", "latin1")).not.toContain(value);
  delete process.env[name];
});
