// Reading a provider's answer: did this credential run out of quota (and until when), or was it
// rejected? Only the credential that got the answer is marked; the table of error types is per
// provider family, the reset-time headers are the ones providers send.
import type { IncomingHttpHeaders } from "node:http";

export interface QuotaVerdict {
  readonly kind: "usage_limit" | "invalid";
  /** Epoch ms the provider said the quota comes back, if it said. */
  readonly until: number | undefined;
  /** Status and error type, for status output and logs (never a value). */
  readonly reason: string;
}

/** Error types and codes that mean "this credential is out of quota", across providers. */
const USAGE_LIMIT_TYPES = [
  "insufficient_quota", // OpenAI
  "rate_limit_exceeded", // OpenAI
  "rate_limit_error", // Anthropic
  "usage_limit_reached", // ChatGPT/Codex logins
  "resource_exhausted", // Google
  "quota_exceeded",
  "billing_hard_limit_reached",
  "too_many_requests",
];

/** Statuses whose body is read (capped) to decide; 429 marks whatever the body says. */
export function mayMark(status: number): boolean {
  return status === 429 || status === 401 || status === 400 || status === 402 || status === 403;
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** `1s`, `6m0s`, `1h2m3.5s`, `20ms`, or a bare number of seconds, in ms. */
export function parseGoDuration(text: string): number | undefined {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t) * 1000;
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let total = 0;
  let consumed = 0;
  for (let m = re.exec(t); m !== null; m = re.exec(t)) {
    const n = Number(m[1]);
    total += m[2] === "h" ? n * 3_600_000 : m[2] === "m" ? n * 60_000 : m[2] === "s" ? n * 1000 : n;
    consumed += m[0].length;
  }
  return consumed === t.length && consumed > 0 ? total : undefined;
}

/** A timestamp (RFC 3339 / HTTP date) or epoch seconds, as epoch ms. */
function parseInstant(text: string, now: number): number | undefined {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) {
    const n = Number(t);
    // Epoch seconds are large; a small number is a delay in seconds.
    return n > 1_000_000_000 ? n * 1000 : now + n * 1000;
  }
  const ms = Date.parse(t);
  return Number.isNaN(ms) ? undefined : ms;
}

/** The reset time a response gives, as epoch ms, or undefined. */
export function resetTime(headers: IncomingHttpHeaders, body: unknown, now = Date.now()): number | undefined {
  const retryAfterMs = header(headers, "retry-after-ms");
  if (retryAfterMs !== undefined && /^\d+(\.\d+)?$/.test(retryAfterMs.trim()))
    return now + Number(retryAfterMs);
  const retryAfter = header(headers, "retry-after");
  if (retryAfter !== undefined) {
    const t = retryAfter.trim();
    if (/^\d+$/.test(t)) return now + Number(t) * 1000;
    const at = Date.parse(t);
    if (!Number.isNaN(at)) return at;
  }
  const candidates: number[] = [];
  for (const name of Object.keys(headers)) {
    const value = header(headers, name);
    if (value === undefined) continue;
    if (name.startsWith("x-ratelimit-reset-")) {
      const ms = parseGoDuration(value);
      if (ms !== undefined) candidates.push(now + ms);
    } else if (name.startsWith("anthropic-ratelimit-") && name.endsWith("-reset")) {
      const at = parseInstant(value, now);
      if (at !== undefined) candidates.push(at);
    } else if (name === "x-ratelimit-reset") {
      const at = parseInstant(value, now);
      if (at !== undefined) candidates.push(at);
    }
  }
  const err = errorObject(body);
  if (err !== undefined) {
    if (typeof err.resets_in_seconds === "number") candidates.push(now + err.resets_in_seconds * 1000);
    if (typeof err.resets_at === "number")
      candidates.push(err.resets_at > 1e12 ? err.resets_at : err.resets_at * 1000);
  }
  const future = candidates.filter((c) => c > now);
  return future.length === 0 ? undefined : Math.max(...future);
}

function errorObject(body: unknown): Record<string, unknown> | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const e = (body as { error?: unknown }).error;
  if (typeof e === "object" && e !== null) return e as Record<string, unknown>;
  return body as Record<string, unknown>;
}

function errorType(body: unknown): string | undefined {
  const e = errorObject(body);
  if (e === undefined) return undefined;
  for (const key of ["type", "code", "status"]) {
    const v = e[key];
    if (typeof v === "string" && v !== "") return v;
  }
  return undefined;
}

function parseBody(text: string | undefined): unknown {
  if (text === undefined || text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * What a response means for the credential that got it: out of quota, rejected, or nothing.
 * `bodyText` is the (capped) error body when the status made it worth reading.
 */
export function classify(
  status: number,
  headers: IncomingHttpHeaders,
  bodyText: string | undefined,
  now = Date.now(),
): QuotaVerdict | undefined {
  const body = parseBody(bodyText);
  const type = errorType(body);
  const text = (bodyText ?? "").toLowerCase();
  const saysUsageLimit = USAGE_LIMIT_TYPES.some((t) => type === t || text.includes(`"${t}"`));
  const reason = `HTTP ${status}${type ? ` ${type}` : ""}`;
  if (status === 429 || (saysUsageLimit && (status === 400 || status === 402 || status === 403))) {
    return { kind: "usage_limit", until: resetTime(headers, body, now), reason };
  }
  if (status === 401) return { kind: "invalid", until: undefined, reason };
  return undefined;
}
