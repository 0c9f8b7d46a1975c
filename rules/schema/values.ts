// The rule file's value types shared by its sections: names, headers, credential references,
// host patterns, durations, sizes, URLs (through rules/url.ts), mounts, the listen address.
import * as z from "zod";
import { splitCommandLine } from "../../core/command-line.js";
import { parseHostPort } from "../address.js";
import { CredentialRefError, parseCredentialRef } from "../credential-ref.js";
import { parseHostPattern } from "../host-pattern.js";
import { parseByteSize, parseDuration } from "../units.js";
import { checkUrl, httpsOrLoopbackHttp, noCredentials, noQueryOrFragment, scheme } from "../url.js";
import { expect, matching, parsedString } from "./messages.js";

export const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** An HTTP header name (RFC 9110 token). */
export const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers a rule may not set: framing, routing and connection management belong to keybroker. */
export const RESERVED_HEADERS = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "proxy-authorization",
  "proxy-authenticate",
  "proxy-connection",
]);

export const credentialRefSchema = z
  .string(expect("a credential reference string"))
  .superRefine((value, ctx) => {
    try {
      parseCredentialRef(value);
    } catch (err) {
      ctx.addIssue(err instanceof CredentialRefError ? err.message : "not a credential reference");
    }
  });

export const hostPatternSchema = parsedString("a host pattern", (value) => {
  parseHostPattern(value);
});

export const envName = matching(
  NAME,
  "a variable name",
  "must be a variable name: letters, digits and _, not starting with a digit",
);
export const headerName = matching(HEADER_NAME, "a header name", "is not a valid header name");
export const headerValue = matching(
  /^[^\r\n\0]*$/,
  "a header value string",
  "a header value cannot contain line breaks or NUL",
);
export const settableHeaderName = headerName.refine(
  (name) => !RESERVED_HEADERS.has(name.toLowerCase()),
  "keybroker manages this header itself — remove it from headers.set",
);
export const nonEmpty = (what = "a string") => z.string(expect(what)).min(1);
export const filePath = nonEmpty("a file path").refine(
  (p) => !/^~[^/]/.test(p) && !p.includes("\0"),
  "use an absolute path, a path relative to the rule file, or ~/ for your home folder",
);

export const duration = z
  .union(
    [z.number(), z.string()],
    expect('a duration such as "60s", "5m" or "500ms", or a number of seconds'),
  )
  .refine(
    (value) => parseDuration(value) !== undefined,
    'is not a duration — write "500ms", "60s", "5m", "1h", or a number of seconds',
  );

/** A duration above zero (a timeout). */
export const positiveDuration = duration.refine(
  (value) => (parseDuration(value) ?? 1) > 0,
  'must be more than zero, as in "5s"',
);

export const byteSize = z
  .union([z.number(), z.string()], expect('a size such as "4MiB", or a number of bytes'))
  .refine(
    (value) => parseByteSize(value) !== undefined,
    'is not a size — write "4MiB", "512KiB", or a number of bytes',
  );

/** An https URL; plain http only toward loopback (local fakes and tests). */
export const endpointUrl = parsedString("a URL", (value) => {
  checkUrl(value, 'write "https://host/path"', [
    noCredentials(),
    scheme(
      httpsOrLoopbackHttp,
      "must be an https:// URL (http:// is accepted only for 127.0.0.1, ::1 and localhost)",
    ),
  ]);
});

/** A reverse-mode upstream: an https origin with an optional base path (no query or fragment). */
export const upstreamSchema = parsedString("an https origin", (value) => {
  checkUrl(value, 'write an origin such as "https://api.example.com"', [
    scheme(
      (url) => url.protocol === "https:",
      'must be an https:// origin such as "https://api.example.com"',
    ),
    noCredentials(),
    noQueryOrFragment(
      (url) =>
        `must be an origin with an optional base path, such as "${url.origin}/v1" — no query or fragment`,
    ),
  ]);
});

/** `notify: "cmd:<argv>"`: a command run with one JSON event on stdin (docs/spec.md §16). */
export const notifySchema = parsedString('a command reference "cmd:<argv>"', (value) => {
  if (!value.startsWith("cmd:")) {
    throw new Error('must start with "cmd:", e.g. "cmd:/usr/local/bin/notify-chat --channel ops"');
  }
  if (splitCommandLine(value.slice(4)).length === 0) {
    throw new Error('names no command: write the program and its arguments after "cmd:"');
  }
});

export const mountSchema = matching(
  /^\/p\/[A-Za-z0-9._~-]+\/?$/,
  "a mount path",
  'must be "/p/<name>" (one path segment after /p/)',
);

export const listenSchema = z
  .union([z.string(), z.number()], expect('"host:port" or a port number'))
  .superRefine((value, ctx) => {
    if (typeof value === "number") {
      if (!Number.isInteger(value) || value < 0 || value > 65535)
        ctx.addIssue("a port is a whole number 0-65535");
      return;
    }
    try {
      parseHostPort(value, { allowPortZero: true });
    } catch (err) {
      ctx.addIssue(err instanceof Error ? err.message : String(err));
    }
  });
