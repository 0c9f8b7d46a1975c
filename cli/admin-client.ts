// Talks to the running broker's admin API with the home's admin token.
import { readFileSync } from "node:fs";
import { adminTokenPath } from "../admin/api.js";
import { UserError } from "../core/errors.js";
import type { RunningBroker } from "./context.js";
import { type LocalAnswer, localRequest } from "./local-http.js";

/** How long an admin call may take, its answer included. */
const ADMIN_TIMEOUT_MS = 10_000;

export async function adminRequest<T>(
  home: string,
  broker: RunningBroker,
  method: "GET" | "POST" | "DELETE",
  action: string,
  body?: unknown,
): Promise<T> {
  let token: string;
  try {
    token = readFileSync(adminTokenPath(home), "utf8").trim();
  } catch {
    throw new UserError(
      `cannot read ${adminTokenPath(home)}: run this command as the user that runs the broker`,
    );
  }
  let res: LocalAnswer;
  try {
    res = await localRequest(`${broker.url}/__keybroker/admin/${action}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      timeoutMs: ADMIN_TIMEOUT_MS,
    });
  } catch (err) {
    throw new UserError(
      `the broker at ${broker.url} did not answer (${(err as Error).message}); \`keybroker status\` says whether it runs`,
    );
  }
  let answer: T & { error?: { message: string; hint?: string } };
  try {
    answer = JSON.parse(res.text);
  } catch {
    throw new UserError(`the broker answered ${res.status} with no JSON: is ${broker.url} a keybroker?`);
  }
  if (!res.ok) {
    const e = answer.error;
    throw new UserError(
      e ? `${e.message}${e.hint ? ` (${e.hint})` : ""}` : `the broker answered ${res.status}`,
    );
  }
  return answer;
}
