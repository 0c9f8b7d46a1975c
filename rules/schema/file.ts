// The whole rule file (docs/spec.md §4), section by section, and the types of a parsed file.
import * as z from "zod";
import { parseHostPort } from "../address.js";
import { clientSchema } from "./clients.js";
import { expect, listOf, oneOrMany, parsedString, strict } from "./messages.js";
import { clientName, providerId } from "./names.js";
import { providerSchema } from "./providers.js";
import { sourcesSchema } from "./sources.js";
import { stateSchema } from "./state.js";
import { byteSize, filePath, listenSchema, nonEmpty, notifySchema, positiveDuration } from "./values.js";

/** How long each stage of a client connection, and the upstream, may take (docs/spec.md §3.8). */
export const timeoutsSchema = strict({
  /** From the CONNECT's 200 to the end of the client's TLS handshake. */
  handshake: positiveDuration.optional(),
  /** Until a request's headers are complete (from the connection, or the request's first byte). */
  headers: positiveDuration.optional(),
  /** An idle keep-alive connection between requests. */
  keep_alive: positiveDuration.optional(),
  /** A plain tunnel (a host no rule names) with no byte either way for this long is closed. */
  tunnel_idle: positiveDuration.optional(),
  /** Upstream silence: before its response headers, and between body chunks. */
  upstream: positiveDuration.optional(),
});

/** `fallbacks.<id>`: the providers a reverse-mode request moves to, in order, when its pool is exhausted. */
export const fallbackListSchema = listOf(
  z.union(
    [
      providerId,
      strict({
        provider: providerId,
        /** Rewrites the JSON body's "model" for this fallback: { "gpt-4o": "openai/gpt-4o" }. */
        model: z.record(nonEmpty(), nonEmpty(), expect("a map of model names")).optional(),
      }),
    ],
    expect('a provider id, or { provider: <id>, model: { "<from>": "<to>" } }'),
  ),
  "a list of provider ids",
);

export const resolveKey = parsedString('"host:port"', (value) => {
  parseHostPort(value);
});
export const resolveTarget = parsedString('"address:port"', (value) => {
  parseHostPort(value);
});

/**
 * The whole rule file. Top-level sections and provider/client entries may be left empty in the
 * YAML (`providers:` with everything below commented out, `openai:` to keep the catalogue entry
 * as it is), so they accept null.
 */
export const ruleFileSchema = strict({
  // Required (docs/spec.md §4): a file an editor truncated, or one written for another format, is
  // refused rather than read as "no providers".
  version: z.literal(1, {
    error: (issue) =>
      issue.input === undefined
        ? 'required key is missing: a rule file must say "version: 1" (on its first line, by convention)'
        : undefined,
  }),
  listen: listenSchema.nullish(),
  intercept: z.enum(["providers", "all"]).optional(),
  upstream_ca: oneOrMany(filePath, "a file path or a list of file paths").nullish(),
  resolve: z.record(resolveKey, resolveTarget, expect('a map of "host:port" to "address:port"')).nullish(),
  state: stateSchema.optional(),
  sources: sourcesSchema.nullish(),
  providers: z
    .record(providerId, providerSchema.nullable(), expect("a map of provider ids to providers"))
    .nullish(),
  fallbacks: z.record(providerId, fallbackListSchema, expect("a map of provider ids to lists")).nullish(),
  clients: z
    .record(clientName, clientSchema.nullable(), expect("a map of client names to clients"))
    .nullish(),
  catalogue: z.boolean(expect("true or false")).optional(),
  /** `keybroker run` (decision 116): isolate by default (true), or run plainly without the notice (false). */
  run: strict({
    isolate: z.boolean(expect("true or false")).optional(),
  }).nullish(),
  /** Requests held by `approve` rules (docs/spec.md §16). */
  approvals: strict({
    /** How long a held request waits for an answer; a rule's own timeout wins. Default 120s. */
    timeout: positiveDuration.optional(),
    /** Requests this broker holds at once; beyond, 503 approvals_full (decision 108). Default 64. */
    max_pending: z.number(expect("a whole number")).int("must be a whole number").min(1).optional(),
    /** Bytes of held bodies this broker keeps at once; beyond, 503 approvals_full. Default 64MiB. */
    max_bytes: byteSize.optional(),
  }).nullish(),
  audit: strict({
    enabled: z.boolean(expect("true or false")).optional(),
    max_size: byteSize.optional(),
    keep: z.number(expect("a whole number")).int("must be a whole number").min(1).max(100).optional(),
    /** Refuse to inject (503 audit_unavailable) while the audit log cannot be written. */
    require: z.boolean(expect("true or false")).optional(),
  })
    .superRefine((audit, ctx) => {
      if (audit.require === true && audit.enabled === false) {
        ctx.addIssue({
          code: "custom",
          message: "cannot require an audit log that is turned off (enabled: false): remove one of the two",
          path: ["require"],
        });
      }
    })
    .nullish(),
  scrub: strict({
    /** Scrub echoes of the credential from responses (default true; off only for benchmarks). */
    responses: z.boolean(expect("true or false")).optional(),
  }).nullish(),
  /** How long each stage of a client connection, and the upstream, may take (docs/spec.md §3.8). */
  timeouts: timeoutsSchema.nullish(),
  limits: strict({
    /** Open client connections; beyond it new ones are refused (default: from the fd limit). */
    connections: z.number(expect("a whole number")).int("must be a whole number").min(1).optional(),
  }).nullish(),
  /** Run once per event that needs a person (approval pending, reauth_required). */
  notify: notifySchema.nullish(),
  log: strict({
    /** One log line per request: client, provider, method, host, path, status, bytes, time. */
    access: z.boolean(expect("true or false")).optional(),
  }).nullish(),
});

/** A parsed, schema-valid rule file: the YAML's shape, before defaults. */
export type RuleFile = z.infer<typeof ruleFileSchema>;
/** One provider entry as written in a rule file or the embedded catalogue. */
export type ProviderInput = z.infer<typeof providerSchema>;
export type ClientInput = z.infer<typeof clientSchema>;
export type SourcesInput = z.infer<typeof sourcesSchema>;
