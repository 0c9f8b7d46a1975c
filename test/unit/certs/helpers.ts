// Shared helpers for the certs tests: throwaway homes and real external programs.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const homes: string[] = [];

/** A fresh, empty broker home under the OS temp folder. */
export function makeHome(): string {
  const home = mkdtempSync(join(tmpdir(), "keybroker-certs-"));
  homes.push(home);
  return home;
}

export function removeHomes(): void {
  for (const home of homes.splice(0)) rmSync(home, { recursive: true, force: true });
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program without blocking the event loop (a TLS server in this process may need to answer). */
export function run(file: string, args: string[]): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 30_000 }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") {
        reject(err);
        return;
      }
      resolve({ code: typeof err?.code === "number" ? err.code : 0, stdout, stderr });
    });
  });
}
