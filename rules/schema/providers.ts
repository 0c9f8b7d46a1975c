// `providers.<id>` (docs/spec.md §4-§9): hosts, injection, pool, headers, placeholder, policy,
// reverse mode, service accounts; `oauth:` and `mcp:` are in oauth.ts.
import * as z from "zod";
import { expect, listOf, matching, oneOrMany, strict } from "./messages.js";
import { clientName, role } from "./names.js";
import { checkMcp, checkOAuth, mcpUrlSchema, oauthSchema } from "./oauth.js";
import {
  byteSize,
  credentialRefSchema,
  duration,
  envName,
  headerName,
  headerValue,
  hostPatternSchema,
  mountSchema,
  nonEmpty,
  positiveDuration,
  settableHeaderName,
  upstreamSchema,
} from "./values.js";

export const injectSchema = strict({
  header: oneOrMany(headerName, "a header name or a list of header names").optional(),
  query: matching(
    /^[A-Za-z0-9._~-]+$/,
    "a query parameter name",
    "is not a valid query parameter name",
  ).optional(),
  basic: strict({ username: z.string(expect("a string")).optional() }).optional(),
  format: z
    .string(expect("a string"))
    .refine((f) => f.includes("{secret}"), 'must contain "{secret}", as in "Bearer {secret}"')
    .refine((f) => !/[\r\n\0]/.test(f), "cannot contain line breaks")
    .optional(),
});

export const poolSchema = strict({
  strategy: z.enum(["fill_first", "round_robin", "least_used"]).optional(),
  affinity: z.literal("client").optional(),
  retry_body_limit: byteSize.optional(),
  cooldown: duration.optional(),
});

export const headersSchema = strict({
  set: z.record(settableHeaderName, headerValue, expect("a map of header names to values")).optional(),
  remove: listOf(headerName, "a list of header names").optional(),
});

export const placeholderSchema = strict({
  /** One variable, or a list that all get the same placeholder (decision 122). */
  env: z
    .union(
      [envName, z.array(envName).min(1, "list at least one variable name")],
      expect("a variable name or a list of them"),
    )
    .optional(),
  prefix: matching(
    /^[A-Za-z0-9._-]{0,32}$/,
    "a string",
    "a prefix is at most 32 letters, digits, dots, dashes or underscores",
  ).optional(),
  value: matching(
    /^[\x21-\x7e]{8,512}$/,
    "a string",
    "a fixed placeholder is 8 or more printable characters without spaces",
  ).optional(),
});

export const policyMatcherSchema = strict({
  method: oneOrMany(
    matching(/^[A-Za-z]+$/, "an HTTP method", "is not an HTTP method"),
    "a method or a list of methods",
  ).optional(),
  path: oneOrMany(
    matching(/^\/\S*$/, "a path glob", 'a path glob starts with "/", as in "/repos/**"'),
    "a path glob or a list of path globs",
  ).optional(),
  /** `insensitive`: the paths match in any case, for an API that ignores case in paths. */
  case: z.enum(["sensitive", "insensitive"]).optional(),
  /** The rule applies only to clients with one of these roles. */
  roles: oneOrMany(role, "a role or a list of roles").optional(),
  /** The rule applies only to these clients. */
  clients: oneOrMany(clientName, "a client name or a list of client names").optional(),
  /** The rule applies only to `run --isolate` launches of these commands (decision 117). */
  launch: oneOrMany(
    matching(/^[^\s/]+$/, "a command name", "is not a command name — give its base name, as in claude"),
    "a command name or a list of command names",
  ).optional(),
  /** approve only: how long a held request waits for an answer (default approvals.timeout). */
  timeout: positiveDuration.optional(),
});

export const policyRuleSchema = strict({
  deny: policyMatcherSchema.optional(),
  approve: policyMatcherSchema.optional(),
}).superRefine((rule, ctx) => {
  if ((rule.deny === undefined) === (rule.approve === undefined)) {
    ctx.addIssue(
      'a policy rule is either "deny: {method, path}" or "approve: {method, path}" — exactly one of them',
    );
  }
  if (rule.deny?.timeout !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["deny", "timeout"],
      message: "a deny rule refuses at once — timeout belongs to approve rules",
    });
  }
});

export const awsSigV4Schema = strict({
  region: matching(/^[a-z0-9-]+$/, "a region name", "is not a region name, such as us-east-1"),
  service: matching(/^[a-z0-9-]+$/, "a service name", "is not a service name, such as bedrock"),
  access_key_id: credentialRefSchema,
  secret_access_key: credentialRefSchema,
  session_token: credentialRefSchema.optional(),
});

export const authSchema = strict({
  google_service_account: credentialRefSchema.optional(),
  scopes: listOf(nonEmpty(), "a list of scopes").optional(),
  /** How long the token endpoint may take (default 15 s). */
  token_timeout: duration.optional(),
  aws_sigv4: awsSigV4Schema.optional(),
}).superRefine((auth, ctx) => {
  if ((auth.google_service_account === undefined) === (auth.aws_sigv4 === undefined)) {
    ctx.addIssue("auth is either google_service_account or aws_sigv4 — exactly one of them");
  } else if (auth.scopes !== undefined && auth.google_service_account === undefined) {
    ctx.addIssue({ code: "custom", message: "scopes belong to google_service_account", path: ["scopes"] });
  } else if (auth.token_timeout !== undefined && auth.google_service_account === undefined) {
    ctx.addIssue({
      code: "custom",
      message: "token_timeout belongs to google_service_account",
      path: ["token_timeout"],
    });
  }
});

export const providerSchema = strict({
  hosts: listOf(hostPatternSchema, "a list of host patterns").optional(),
  inject: injectSchema.optional(),
  credentials: listOf(credentialRefSchema, "a list of credential references").optional(),
  pool: poolSchema.optional(),
  headers: headersSchema.optional(),
  placeholder: placeholderSchema.optional(),
  policy: listOf(policyRuleSchema, "a list of deny/approve rules").optional(),
  mount: mountSchema.optional(),
  upstream: upstreamSchema.optional(),
  auth: authSchema.optional(),
  oauth: oauthSchema.optional(),
  /** docs/spec.md §15: the URL of a remote MCP server (Streamable HTTP) keybroker logs in to. */
  mcp: mcpUrlSchema.optional(),
  allow_private_upstream: z.boolean(expect("true or false")).optional(),
  /** How long the upstream may be silent (before its response headers, between body chunks). */
  timeout: positiveDuration.optional(),
}).superRefine((provider, ctx) => {
  if (provider.mcp !== undefined) checkMcp(provider, provider.oauth, ctx);
  else if (provider.oauth !== undefined) checkOAuth(provider.oauth, ctx);
});
