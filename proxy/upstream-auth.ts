// Providers that authenticate with a service account rather than a key: the request is
// authorized right before it leaves, after every other header change (docs/spec.md §9).
import type { Dispatcher } from "undici";
import { BrokerError } from "../core/errors.js";
import { unhandledKind } from "../rules/kinds/index.js";
import type { AwsSigV4Auth, GoogleServiceAccountAuth, ProviderRule } from "../rules/types.js";
import { DEFAULT_GOOGLE_SCOPE, GoogleTokenSource } from "../secrets/google-sa.js";
import { describeAttempts, type SecretResolver } from "../secrets/resolver.js";
import { Secret } from "../secrets/secret.js";
import { removeHeader, replaceHeaders, setHeader } from "./headers.js";
import type { AuthTarget, UpstreamAuth } from "./runtime.js";

export type { UpstreamAuth };

async function resolveValue(
  resolver: SecretResolver,
  ref: string,
  provider: string,
  what: string,
): Promise<Secret> {
  const r = await resolver.resolve(ref);
  if (r.secret === undefined) {
    throw new BrokerError(
      "credential_unavailable",
      `the ${what} of provider "${provider}" (${ref}) has no value: ${describeAttempts(r.attempts)}`,
      {
        provider,
        hint: `set ${ref} and run keybroker check`,
      },
    );
  }
  return r.secret;
}

export function createUpstreamAuth(
  rule: ProviderRule,
  resolver: SecretResolver,
  dispatcher: () => Dispatcher,
): UpstreamAuth | undefined {
  // The one place a provider kind's signer is chosen (decision 132).
  switch (rule.kind) {
    case "google_service_account":
      return googleServiceAccount(rule, rule.auth, resolver, dispatcher);
    case "aws_sigv4":
      return awsSigV4(rule, rule.auth, resolver);
    case "key_pool":
    case "oauth_login":
    case "client_credentials":
    case "mcp":
      return undefined;
    default:
      return unhandledKind(rule);
  }
}

function googleServiceAccount(
  rule: ProviderRule,
  auth: GoogleServiceAccountAuth,
  resolver: SecretResolver,
  dispatcher: () => Dispatcher,
): UpstreamAuth {
  const tokens = new GoogleTokenSource(
    rule.id,
    auth.scopes ?? [DEFAULT_GOOGLE_SCOPE],
    async () => (await resolveValue(resolver, auth.key, rule.id, "service-account key")).reveal(),
    (opts) => dispatcher().request(opts),
    auth.tokenTimeoutMs,
  );
  return {
    needsBody: false,
    async authorize(x) {
      const token = await tokens.token();
      x.secret = token;
      setHeader(x.headers, "authorization", `Bearer ${token.reveal()}`);
      // A client that sent its placeholder as an API key header does not need it upstream.
      for (const name of rule.inject.headers) if (name !== "authorization") removeHeader(x.headers, name);
    },
    rejected() {
      tokens.invalidate();
      return true;
    },
  };
}

function awsSigV4(rule: ProviderRule, auth: AwsSigV4Auth, resolver: SecretResolver): UpstreamAuth {
  return {
    needsBody: true,
    async authorize(x) {
      const [id, key, token] = await Promise.all([
        resolveValue(resolver, auth.accessKeyId, rule.id, "access key id"),
        resolveValue(resolver, auth.secretAccessKey, rule.id, "secret access key"),
        auth.sessionToken === undefined
          ? undefined
          : resolveValue(resolver, auth.sessionToken, rule.id, "session token"),
      ]);
      if (
        x.body === undefined &&
        x.req.headers["content-length"] !== "0" &&
        hasBody(x) &&
        auth.service !== "s3"
      ) {
        throw new BrokerError(
          "payload_too_large",
          `the request body is too large to sign for provider "${rule.id}"`,
          {
            provider: rule.id,
            hint: `raise providers.${rule.id}.pool.retry_body_limit (the payload is signed over its hash)`,
          },
        );
      }
      // Loaded on first use: the signer and its dependencies cost ~8 MiB that most brokers never need.
      const { signSigV4 } = await import("../secrets/aws-sigv4.js");
      const signed = await signSigV4(
        {
          method: x.method,
          host: x.host,
          port: x.port,
          path: x.path,
          headers: x.headers,
          body: x.body ?? (hasBody(x) ? undefined : Buffer.alloc(0)),
        },
        auth.region,
        auth.service,
        { accessKeyId: id.reveal(), secretAccessKey: key.reveal(), sessionToken: token?.reveal() },
      );
      replaceHeaders(x.headers, signed);
      x.secret = new Secret(key.reveal(), `aws_sigv4:${id.id}`, key.source);
    },
    rejected() {
      return false;
    },
  };
}

function hasBody(x: AuthTarget): boolean {
  const h = x.req.headers;
  return (
    h["transfer-encoding"] !== undefined || (h["content-length"] !== undefined && h["content-length"] !== "0")
  );
}
