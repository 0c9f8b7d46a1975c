// `rediss://` (docs/spec.md §17): the fleet's Redis over TLS, verified as every upstream is (docs/spec.md §3.7):
// the system's roots plus the rule file's `upstream_ca` files, and the host of `state.url`
// checked against the server's certificate. No new rule-file key: a Redis signed by a private
// CA is trusted by listing that CA in `upstream_ca`, as for any other server keybroker calls.
// A refused certificate is reported with the fix, not only OpenSSL's words (errors.ts).
import { type ConnectionOptions, createSecureContext } from "node:tls";
import { trustedRoots } from "../../certs/bundle.js";
import type { RedisConfig } from "./config.js";

/** ioredis's `tls` option for a rediss:// URL; nothing for redis://. */
export function redisTls(config: RedisConfig): { tls?: ConnectionOptions } {
  if (new URL(config.url).protocol !== "rediss:") return {};
  const secureContext = createSecureContext({ ca: trustedRoots(config.ca ?? []) });
  return { tls: { secureContext, rejectUnauthorized: true } };
}
