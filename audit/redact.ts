// The redactor behind `keybroker redact`: masks secrets in transcripts and logs, never in the
// commands an agent runs (it is a filter the user applies to text after the fact).
//
// Two nets, applied line by line:
//   1. every value known to the configured sources, in each form it takes in text (raw,
//      JSON-escaped, URL-encoded, base64), → `[REDACTED]`;
//   2. secret-shaped strings: vendor key formats, JWTs, PEM private keys (multi-line blocks),
//      credential headers, `KEY=`/`TOKEN=`/`SECRET=`/`PASSWORD=` assignments, URL passwords.
//
// Mask format: a vendor's fixed prefix is kept so a reader can tell what was there
// (`sk-ant-[REDACTED]`, `ghp_[REDACTED]`, `SG.[REDACTED]`); every character after the prefix is
// masked (a three-segment `SG.<id>.<secret>` key loses both segments). Names, header names,
// auth schemes and URL user names are kept: `Authorization: Bearer [REDACTED]`,
// `DB_PASSWORD=[REDACTED]`, `postgres://app:[REDACTED]@db`. keybroker placeholders
// (`…kbph-<32 chars>`) are not secrets and are left visible.
import { Transform, type TransformCallback } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { Scrubber } from "../core/scrub.js";

export const MASK = "[REDACTED]";

/** A line longer than this is cut at its last whitespace and processed in pieces. */
const MAX_LINE = 1024 * 1024;

const PLACEHOLDER = /kbph-[0-9A-Za-z]{32}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HEX_DIGEST = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** `$VAR`, `${VAR}`, `%VAR%`, `<your-key>`, `{{ secret }}`, `***`, `process.env.X`, or already masked. */
const REFERENCE = /^(?:\$|%[A-Za-z_]|<|\{\{|\*{3}|process\.env\.|os\.environ|os\.getenv|env\.)|\[REDACTED/;
const LITERALS = /^(?:true|false|null|nil|none|undefined|yes|no|on|off)$/i;

/** Letters only, as words: `required`, `my-token`, `OPENAI_API_KEY`. Not `hunter2`, not `aB3x…`. */
function isWordLike(v: string): boolean {
  return /^(?:[A-Za-z][a-z]*|[A-Z]+)(?:[-_. ]?(?:[A-Za-z][a-z]*|[A-Z]+))*$/.test(v);
}

function skippable(v: string): boolean {
  return v === "" || REFERENCE.test(v) || LITERALS.test(v) || PLACEHOLDER.test(v);
}

/** Could be a secret: long enough and not a word, a variable reference or a literal. */
function plausible(v: string): boolean {
  return v.length >= 8 && !skippable(v) && !isWordLike(v);
}

/** Has both letters and digits, as generated keys do (keeps `sk-` from eating hyphenated prose). */
function looksGenerated(v: string): boolean {
  return /[0-9]/.test(v) && /[A-Za-z]/.test(v) && ((/[a-z]/.test(v) && /[A-Z]/.test(v)) || v.length >= 32);
}

interface TokenRule {
  readonly name: string;
  /** Group `pre` is kept, group `secret` is masked. */
  readonly re: RegExp;
  readonly check?: (secret: string) => boolean;
}

const B = "(?<![A-Za-z0-9_\\-])";
const E = "(?![A-Za-z0-9_\\-])";

function token(name: string, pre: string, secret: string, check?: (s: string) => boolean): TokenRule {
  const re = new RegExp(`${B}(?<pre>${pre})(?<secret>${secret})${E}`, "g");
  return check === undefined ? { name, re } : { name, re, check };
}

/** Vendor key formats, most specific first. */
export const TOKEN_RULES: readonly TokenRule[] = [
  token("anthropic", "sk-ant-", "[A-Za-z0-9_\\-]{20,}"),
  // Dot-tolerant (keys with `.` inside are masked whole); a trailing `.` ends a sentence.
  token(
    "openai-style sk-",
    "sk-",
    "(?=[A-Za-z0-9_\\-.]{20})[A-Za-z0-9_\\-.]*[A-Za-z0-9_\\-]",
    looksGenerated,
  ),
  token("github", "gh[pousr]_", "[A-Za-z0-9]{30,}"),
  token("github fine-grained", "github_pat_", "[A-Za-z0-9_]{30,}"),
  token(
    "gitlab",
    "gl(?:pat|dt|rt|ptt|ft|imt|cbt|soat|ffct|oas|agent)-",
    "[A-Za-z0-9_\\-]{20,}(?:\\.[A-Za-z0-9_\\-]+)*",
  ),
  token("gitlab runner registration", "GR1348941", "[A-Za-z0-9_\\-]{20,}"),
  token("slack", "xox[abprse]-", "[A-Za-z0-9\\-]{10,}"),
  token("slack app", "xapp-", "[0-9]-[A-Za-z0-9\\-]{10,}"),
  token("slack webhook", "hooks\\.slack\\.com/services/", "[A-Za-z0-9_/]{20,}"),
  token("google api key", "AIza", "[0-9A-Za-z_\\-]{30,}"),
  token("google oauth access token", "ya29\\.", "[0-9A-Za-z_\\-.]{20,}"),
  token("google oauth client secret", "GOCSPX-", "[0-9A-Za-z_\\-]{20,}"),
  token("aws access key id", "(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])", "[A-Z0-9]{16}"),
  token("stripe", "[sr]k_(?:live|test)_", "[A-Za-z0-9]{16,}"),
  token("stripe webhook", "whsec_", "[A-Za-z0-9]{24,}"),
  token("sendgrid", "SG\\.", "[A-Za-z0-9_\\-]{16,}\\.[A-Za-z0-9_\\-]{16,}"),
  token("hugging face", "hf_", "[A-Za-z0-9]{30,}"),
  token("hugging face org", "api_org_", "[A-Za-z0-9]{30,}"),
  token("replicate", "r8_", "[A-Za-z0-9]{30,}"),
  token("npm", "npm_", "[A-Za-z0-9]{36,}"),
  token("pypi", "pypi-", "[A-Za-z0-9_\\-]{50,}"),
  token("groq", "gsk_", "[A-Za-z0-9]{40,}"),
  token("xai", "xai-", "[A-Za-z0-9]{40,}"),
  token("perplexity", "pplx-", "[A-Za-z0-9]{40,}"),
  token("nvidia", "nvapi-", "[A-Za-z0-9_\\-]{40,}"),
  token("digitalocean", "do[opr]_v1_", "[a-f0-9]{64}"),
  token("shopify", "shp(?:at|ca|pa|ss)_", "[a-fA-F0-9]{32}"),
  token("linear", "lin_api_", "[A-Za-z0-9]{30,}"),
  token("jwt", "", "eyJ[A-Za-z0-9_\\-]{8,}\\.eyJ[A-Za-z0-9_\\-]{8,}(?:\\.[A-Za-z0-9_\\-]*){1,3}"),
];

/** An AWS secret access key by its context: `aws_secret_access_key wJalr…`, `AWS secret: wJalr…`. */
const AWS_SECRET =
  /(?<pre>\baws[A-Za-z_ -]{0,20}?secret[A-Za-z_ -]{0,20}?["']?(?:\s*[=:]\s*|\s+)["']?)(?<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])/gi;

const HEADER_NAMES =
  "proxy-authorization|authorization|x-api-key|api-key|x-goog-api-key|x-auth-token|private-token";
/** `Authorization: Bearer x`, `-H 'x-api-key: x'`, `"authorization": "Basic x"`, `{'api-key': 'x'}`. */
const HEADER_LEAD = `(?<![A-Za-z0-9_\\-])(?:${HEADER_NAMES})\\\\?["']?\\s*[:=]\\s*\\\\?["']?\\s*`;
/** Schemes whose value runs to the end of the quoted string or line: `Digest a=1, b=2`. */
const HEADER_MULTI = new RegExp(
  `(?<pre>${HEADER_LEAD}(?:AWS4-HMAC-SHA256|Digest|OAuth|Signature)\\s+)(?<secret>[^"'\\\\\\r\\n]+)`,
  "gi",
);
const HEADER_SINGLE = new RegExp(
  `(?<pre>${HEADER_LEAD}(?<scheme>(?:Bearer|Basic|Token|Bot|Key|Negotiate)\\s+)?)(?<secret>[^\\s"'\\\\,;]+)`,
  "gi",
);

/** `scheme://user:password@host` (URLs and connection strings). */
const URL_PASSWORD =
  /(?<pre>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s:/?#@"'<>]*:)(?<secret>[^\s/?#@"'<>]+)(?<post>@)/g;

/** Assignments: `NAME=v`, `NAME: v`, `"name": "v"`, `name = 'v'`, `\"name\": \"v\"`, `name := v`. */
const ASSIGNMENT = new RegExp(
  [
    // Starts only where a name can start, so a long run of name characters is scanned once.
    "(?<![A-Za-z0-9_.\\-])",
    "(?<q>\\\\?[\"']?)(?<name>[A-Za-z_][A-Za-z0-9_.\\-]*)\\k<q>",
    "(?<sep>\\s*(?:=>|:=|=|:)\\s*)",
    "(?:",
    '\\\\"(?<v4>[^"\\\\]*)\\\\"',
    '|"(?<v1>(?:\\\\.|[^"\\\\\\r\\n])*)"',
    "|'(?<v2>[^'\\r\\n]*)'",
    // Unquoted: must end at a delimiter, so `get_token()` and `os.environ[...]` are left alone.
    "|(?<v3>[^\\s\"'`,;&}\\])<>{\\[(]+)(?=[\\s\"'`,;&}\\])<>]|$)",
    ")",
  ].join(""),
  "g",
);

/** `--password x`, `--api-key=x`. */
const FLAG =
  /(?<pre>(?<![A-Za-z0-9_-])--(?:password|passwd|token|secret|api-key|apikey|client-secret)(?:\s+|=))(?<secret>[^\s"'-][^\s"']*)/g;

const PEM_INLINE =
  /(?<pre>-----BEGIN (?<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----)(?<secret>[\s\S]*?)(?<post>-----END \k<kind>-----)/g;
const PEM_BEGIN = /-----BEGIN ([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----/;

const STRONG_LAST = new Set([
  "password",
  "passwd",
  "pwd",
  "pass",
  "passphrase",
  "secret",
  "secrets",
  "credential",
  "credentials",
  "apikey",
  "privatekey",
  "accesskey",
  "secretkey",
]);
const NON_SECRET_TOKEN_PREV = new Set([
  "page",
  "next",
  "continuation",
  "cursor",
  "max",
  "sync",
  "resume",
  "pagination",
]);
const SECRET_KEY_PREV = new Set([
  "api",
  "access",
  "secret",
  "private",
  "master",
  "account",
  "subscription",
  "encryption",
  "signing",
  "client",
  "admin",
  "service",
  "license",
  "auth",
  "app",
  "session",
  "shared",
]);
const NON_SECRET_KEY_PREV = new Set([
  "sort",
  "cache",
  "idempotency",
  "primary",
  "partition",
  "foreign",
  "public",
  "object",
  "hash",
  "range",
  "row",
  "lookup",
  "index",
  "unique",
  "composite",
  "routing",
  "message",
  "group",
  "dedup",
  "deduplication",
  "table",
  "column",
  "field",
  "map",
  "dict",
  "pub",
  "ssh",
  "item",
  "entity",
  "bucket",
  "file",
  "s3",
  "storage",
  "cursor",
  "shard",
  "translation",
  "i18n",
]);

/** How secret a variable or field name is: `strong` masks any value, `medium` plausible ones. */
export function classifyName(name: string): "strong" | "medium" | undefined {
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase()
    .split(/[_.-]+/)
    .filter((w) => w !== "");
  const last = words[words.length - 1];
  const prev = words[words.length - 2];
  if (last === undefined) return undefined;
  if (STRONG_LAST.has(last) || (last === "auth" && words.length === 1)) return "strong";
  if (last === "token" || last === "key") {
    if (prev !== undefined && prev === "private" && last === "key") return "strong";
    if (last === "token") return prev !== undefined && NON_SECRET_TOKEN_PREV.has(prev) ? undefined : "strong";
    if (prev === undefined) return "medium";
    if (SECRET_KEY_PREV.has(prev)) return "strong";
    return NON_SECRET_KEY_PREV.has(prev) ? undefined : "medium";
  }
  return undefined;
}

/** A line holds structured data here (env file, YAML, JSON, code), not prose. */
function structuredBefore(line: string, offset: number): boolean {
  return /(?:^|[{,;([])\s*(?:-\s+)?(?:export\s+|set\s+|declare\s+)?$/.test(line.slice(0, offset));
}

function maskAssignments(line: string, depth = 0): string {
  return line.replace(ASSIGNMENT, (...args: unknown[]) => {
    const match = args[0] as string;
    const offset = args[args.length - 3] as number;
    const g = args[args.length - 1] as Record<string, string | undefined>;
    const value = g.v1 ?? g.v2 ?? g.v3 ?? g.v4 ?? "";
    const quoted = g.v3 === undefined;
    const cut = match.length - value.length - (quoted ? (g.v4 !== undefined ? 2 : 1) : 0);
    const replaceValue = (by: string) => match.slice(0, cut) + by + match.slice(cut + value.length);
    // Not masked: look inside the value, which may hold more (a JSON document in a JSON string,
    // `url=https://…?token=…`), two levels deep at most.
    const keep = () =>
      value.length > 2 && depth < 2 ? replaceValue(maskAssignments(value, depth + 1)) : match;
    const cls = classifyName(g.name!);
    if (cls === undefined || skippable(value)) return keep();
    if (cls === "medium") {
      if (!plausible(value) || UUID.test(value) || HEX_DIGEST.test(value)) return keep();
    } else if (!quoted && !plausible(value)) {
      const sep = g.sep!;
      // `Password: required` in prose is a sentence, not a secret.
      if (sep.trim() === ":" && !structuredBefore(line, offset)) return keep();
      // `password = user_password` is code assigning a variable, not a literal.
      if (sep.trim() !== ":" && sep !== sep.trim() && isWordLike(value)) return keep();
    }
    return replaceValue(MASK);
  });
}

function replaceGroups(
  line: string,
  re: RegExp,
  check?: (secret: string, scheme?: string) => boolean,
): string {
  return line.replace(re, (...args: unknown[]) => {
    const match = args[0] as string;
    const g = args[args.length - 1] as Record<string, string | undefined>;
    const secret = g.secret ?? "";
    if (check !== undefined && !check(secret, g.scheme)) return match;
    return (g.pre ?? "") + MASK + (g.post ?? "");
  });
}

/** Masks secret-shaped strings in one line (no known values). */
export function redactPatterns(line: string): string {
  let out = line;
  if (out.includes("PRIVATE KEY")) out = replaceGroups(out, PEM_INLINE);
  for (const rule of TOKEN_RULES) {
    out = replaceGroups(
      out,
      rule.re,
      (secret) => !PLACEHOLDER.test(secret) && (rule.check?.(secret) ?? true),
    );
  }
  out = replaceGroups(out, AWS_SECRET);
  out = replaceGroups(out, HEADER_MULTI, (s) => !skippable(s.trim()));
  out = replaceGroups(out, HEADER_SINGLE, (s, scheme) =>
    scheme !== undefined
      ? !skippable(s)
      : plausible(s) && !/^(?:Digest|OAuth|Signature|AWS4-HMAC-SHA256)$/i.test(s),
  );
  out = replaceGroups(out, URL_PASSWORD, (s) => !skippable(s));
  out = replaceGroups(out, FLAG, (s) => !skippable(s));
  return maskAssignments(out);
}

/**
 * Line-by-line redaction with the state a PEM block needs across lines. `line` never holds a
 * newline; `undefined` means the line is dropped (the body of a private key block, shown as one
 * `[REDACTED]` line).
 */
export class Redactor {
  readonly #known = new Scrubber();
  /** Inside a multi-line private key block: its kind, and whether the mask line was written. */
  #pem: { kind: string; masked: boolean } | undefined;

  constructor(knownValues: Iterable<string> = []) {
    for (const value of knownValues) {
      if (!value.includes("\n")) {
        this.#known.add(value);
        continue;
      }
      // A multi-line value (a key file): each of its lines that looks like key material.
      for (const part of value.split(/\r?\n/)) {
        const t = part.trim();
        if (t.length >= 16 && !/\s/.test(t)) this.#known.add(t);
      }
    }
  }

  line(line: string): string | undefined {
    let rest = line;
    let head = "";
    if (this.#pem !== undefined) {
      const end = `-----END ${this.#pem.kind}-----`;
      const at = rest.indexOf(end);
      if (at === -1) {
        if (this.#pem.masked) return undefined;
        this.#pem.masked = true;
        return MASK;
      }
      head = (this.#pem.masked ? "" : MASK) + end;
      rest = rest.slice(at + end.length);
      this.#pem = undefined;
    }
    let out = redactPatterns(this.#known.scrub(rest));
    // A block that begins here and does not end on this line.
    const begin = PEM_BEGIN.exec(out);
    if (begin !== null && !out.includes(`-----END ${begin[1]}-----`, begin.index)) {
      const after = out.slice(begin.index + begin[0].length);
      const masked = after.trim() !== "";
      out = out.slice(0, begin.index + begin[0].length) + (masked ? MASK : "");
      this.#pem = { kind: begin[1]!, masked };
    }
    return head + out;
  }
}

/** Redacts a whole text (the library form of `keybroker redact`). */
export function redactText(text: string, knownValues: Iterable<string> = []): string {
  const r = new Redactor(knownValues);
  const out: string[] = [];
  for (const line of text.split("\n")) {
    const red = r.line(line);
    if (red !== undefined) out.push(red);
  }
  return out.join("\n");
}

/**
 * A streaming filter: bytes in, redacted UTF-8 out, one line at a time. Holds at most one line
 * (a line longer than 1 MiB is cut at its last whitespace), never the whole input.
 */
export function createRedactStream(knownValues: Iterable<string> = []): Transform {
  const r = new Redactor(knownValues);
  const decoder = new StringDecoder("utf8");
  let partial = "";
  const emit = (stream: Transform, lines: string[], last: boolean) => {
    const out: string[] = [];
    for (const line of lines) {
      const red = r.line(line);
      if (red !== undefined) out.push(red);
    }
    if (out.length > 0) stream.push(out.join("\n") + (last ? "" : "\n"));
  };
  return new Transform({
    transform(chunk: Buffer | string, _enc: BufferEncoding, done: TransformCallback) {
      partial += typeof chunk === "string" ? chunk : decoder.write(chunk);
      const nl = partial.lastIndexOf("\n");
      if (nl !== -1) {
        const lines = partial.slice(0, nl).split("\n");
        partial = partial.slice(nl + 1);
        emit(this, lines, false);
      }
      if (partial.length > MAX_LINE) {
        // No newline for a long time: cut at the last whitespace so tokens stay whole.
        const ws = Math.max(partial.lastIndexOf(" "), partial.lastIndexOf("\t"));
        const cut = ws > 0 ? ws + 1 : partial.length;
        const piece = partial.slice(0, cut);
        partial = partial.slice(cut);
        const red = r.line(piece);
        if (red !== undefined) this.push(red);
      }
      done();
    },
    flush(done: TransformCallback) {
      partial += decoder.end();
      if (partial !== "") emit(this, [partial], true);
      done();
    },
  });
}
