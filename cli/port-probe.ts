// Who answers on a port a command was pointed at (decision 143): nothing, this home's broker, a
// keybroker of another home (its health answer names its CA, which is not this home's), or
// another program. Asked once per command, on the command line only.
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CA_CERT_FILE, CA_DIR } from "../certs/ca.js";
import { UserError } from "../core/errors.js";
import { findRunningBrokers, type RunningBroker } from "./context.js";
import { AnswerError, type LocalAnswer, localRequest } from "./local-http.js";

export type PortAnswer =
  | { readonly kind: "nothing" }
  | { readonly kind: "keybroker"; readonly pid: number | undefined; readonly ca: string | undefined }
  | { readonly kind: "other" };

/** What answers keybroker's health check at `url` (http://host:port). */
export async function probePort(url: string): Promise<PortAnswer> {
  let res: LocalAnswer;
  try {
    res = await localRequest(`${url}/__keybroker/health`, { timeoutMs: 1500 });
  } catch (err) {
    // Something answered in HTTP, then broke off, stalled or sent too much: not keybroker.
    return err instanceof AnswerError ? { kind: "other" } : { kind: "nothing" };
  }
  try {
    const body = JSON.parse(res.text) as { ok?: boolean; pid?: number; ca?: string };
    if (body.ok !== true) return { kind: "other" };
    return { kind: "keybroker", pid: body.pid, ca: body.ca };
  } catch {
    return { kind: "other" };
  }
}

/** The home's CA fingerprint, or undefined when it has none yet (never creates one). */
export function homeCaFingerprint(home: string): string | undefined {
  try {
    return new X509Certificate(readFileSync(join(home, CA_DIR, CA_CERT_FILE))).fingerprint256;
  } catch {
    return undefined;
  }
}

/** True when the answer is a keybroker with another CA than the home's: another home's broker. */
export function isForeign(answer: PortAnswer, homeCa: string | undefined): boolean {
  return answer.kind === "keybroker" && answer.ca !== homeCa;
}

/** What a keybroker of another home on `where` means for a command of this home. */
export function foreignBroker(where: string, answer: PortAnswer & { kind: "keybroker" }): string {
  const pid = answer.pid === undefined ? "" : ` (pid ${answer.pid})`;
  return `${where} is served by a keybroker of another home${pid}: it has another CA and does not know this home's placeholders`;
}

/**
 * Why no broker of the home runs on `port`, for `--port N`: who answers there instead, and
 * where the home's brokers run.
 */
export async function notOnPort(home: string, port: number, mine: readonly RunningBroker[]): Promise<string> {
  const parts = [`no keybroker of this home runs on port ${port}`];
  const answer = await probePort(`http://127.0.0.1:${port}`);
  if (isForeign(answer, homeCaFingerprint(home)) && answer.kind === "keybroker") {
    parts.push(`${foreignBroker(`port ${port}`, answer)}; name its home with --home`);
  } else if (answer.kind === "other") {
    parts.push(`another program answers there`);
  }
  if (mine.length > 0) {
    parts.push(
      `${mine.length === 1 ? "one runs" : "they run"} on ${mine
        .map((b) => `port ${b.port} (keybroker status --port ${b.port})`)
        .join(", ")}`,
    );
  }
  return parts.join("; ");
}

/** The error of a command given `--port N` where no broker of the home runs. */
export async function notOnPortError(home: string, port: number): Promise<UserError> {
  return new UserError(await notOnPort(home, port, await findRunningBrokers(home)));
}
