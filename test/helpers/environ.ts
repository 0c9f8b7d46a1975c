// What another process of the user sees: every process's initial environment and command line
// (`/proc/<pid>/environ`, `/proc/<pid>/cmdline`), searched for a secret in the forms the secret
// scan knows. Tests use a secret unique to the run: other engineers' brokers run at the same time.

import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";

/** A real-looking key no other process on the machine holds. */
export function uniqueSecret(prefix: string): string {
  return `${prefix}${process.pid}-${randomBytes(12).toString("hex")}`;
}

function forms(secret: string): string[] {
  return [secret, Buffer.from(secret).toString("base64"), encodeURIComponent(secret)];
}

/** Every `/proc/<pid>/environ|cmdline` holding `secret`, as "<pid> (<command>) <file>". */
export function processesHolding(secret: string): string[] {
  const hits: string[] = [];
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    for (const file of ["environ", "cmdline"]) {
      let text: string;
      try {
        text = readFileSync(`/proc/${pid}/${file}`, "latin1");
      } catch {
        continue; // gone meanwhile
      }
      if (forms(secret).some((f) => text.includes(f))) {
        let comm = "?";
        try {
          comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim();
        } catch {}
        hits.push(`${pid} (${comm}) ${file}`);
      }
    }
  }
  return hits;
}

/**
 * A Node script an agent runs to do the same from inside: it writes every process's environment
 * and command line, base64, one JSON object per line, to `file` for the test to search. A file
 * outside the scanned homes, not stdout: the dump holds whatever other tests' processes have in
 * theirs at that moment (a broker in the milliseconds before it blanks its environment), and
 * everything a test's commands print is scanned for every secret of the suite.
 */
export function dumpEnvirons(file: string): string {
  return `
const fs = require("node:fs");
const lines = [];
for (const pid of fs.readdirSync("/proc").filter((n) => /^\\d+$/.test(n))) {
  const out = { pid };
  for (const f of ["environ", "cmdline"]) {
    try { out[f] = fs.readFileSync("/proc/" + pid + "/" + f).toString("base64"); } catch {}
  }
  lines.push(JSON.stringify(out));
}
fs.writeFileSync(${JSON.stringify(file)}, lines.join("\\n") + "\\n");
`;
}

/** The pids whose dumped environment or command line (from `dumpEnvirons`) holds `secret`. */
export function dumpsHolding(dump: string, secret: string): string[] {
  const hits: string[] = [];
  for (const line of dump.split("\n")) {
    if (!line.startsWith('{"pid"')) continue;
    const entry = JSON.parse(line) as { pid: string; environ?: string; cmdline?: string };
    for (const f of ["environ", "cmdline"] as const) {
      const text = Buffer.from(entry[f] ?? "", "base64").toString("latin1");
      if (forms(secret).some((form) => text.includes(form))) hits.push(`${entry.pid} ${f}`);
    }
  }
  return hits;
}
