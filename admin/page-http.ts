// What the admin page's requests and answers share (decision 104): its security headers, the
// session cookie and page secret as they arrive, form bodies, refusals, the caller's address.
import type { IncomingMessage } from "node:http";

const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join("; ");

export const SECURITY_HEADERS = {
  "content-security-policy": CSP,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "same-origin",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "cache-control": "no-store",
};

const MAX_FORM_BYTES = 16 * 1024;

/** The header the page's script sends the session's page secret in (decision 104). */
export const SESSION_HEADER = "x-keybroker-session";

export class Refused extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    message: string,
  ) {
    super(message);
  }
}

export function cookies(req: IncomingMessage): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0) out.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return out;
}

export async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_FORM_BYTES) throw new Refused(413, "Form too large", "The form sent more than 16 KiB.");
    chunks.push(chunk);
  }
  if (type !== "application/x-www-form-urlencoded") {
    throw new Refused(415, "Not a form", "Changes are sent by the page's forms.");
  }
  return new URLSearchParams(Buffer.concat(chunks).toString("utf8"));
}

export function pageSecret(req: IncomingMessage): string | undefined {
  const v = req.headers[SESSION_HEADER];
  return typeof v === "string" && v !== "" ? v : undefined;
}

export function clientAddress(req: IncomingMessage): string {
  return (req.socket.remoteAddress ?? "unknown").replace(/^::ffff:/, "");
}
