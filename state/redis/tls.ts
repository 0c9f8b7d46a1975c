// `rediss://` (SPEC §17): the fleet's Redis over TLS, verified as every upstream is (SPEC §3.7):
// the system's roots plus the rule file's `upstream_ca` files, and the host of `state.url`
// checked against the server's certificate. No new rule-file key: a Redis signed by a private
// CA is trusted by listing that CA in `upstream_ca`, as for any other server keybroker calls.
// A refused certificate is reported with the fix, not only OpenSSL's words.
import { type ConnectionOptions, createSecureContext } from "node:tls";
import { trustedRoots } from "../../proxy/upstream.js";
import type { RedisStateConfig } from "../../rules/types.js";

/** ioredis's `tls` option for a rediss:// URL; nothing for redis://. */
export function redisTls(config: RedisStateConfig): { tls?: ConnectionOptions } {
  if (new URL(config.url).protocol !== "rediss:") return {};
  const secureContext = createSecureContext({ ca: trustedRoots(config.ca ?? []) });
  return { tls: { secureContext, rejectUnauthorized: true } };
}

/** OpenSSL's reasons for a certificate that chains to no trusted root. */
const UNTRUSTED = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_UNTRUSTED",
]);

/** What went wrong with the connection or a command, said so that the fix is plain. */
export function redisErrorText(err: Error): string {
  const code = (err as NodeJS.ErrnoException).code ?? "";
  // OpenSSL's messages may end in a new line: one line for the log and `status`.
  const said = err.message.replace(/\s+/g, " ").trim();
  if (UNTRUSTED.has(code))
    return `the Redis server's TLS certificate is not trusted (${said}): add the CA that signed it to the rule file's upstream_ca`;
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID")
    return `the Redis server's TLS certificate does not name the host of state.url (${said}): use a name or address the certificate lists`;
  if (code === "CERT_HAS_EXPIRED" || code === "CERT_NOT_YET_VALID")
    return `the Redis server's TLS certificate is outside its validity (${said})`;
  if (/^WRONGPASS/.test(said))
    return `Redis refused the password (${said}): check the value of state.password`;
  if (/^NOAUTH/.test(said))
    return `Redis asks for a password (${said}): add password: <credential reference> to state: in the rule file`;
  // ioredis's words for a command sent while the connection is down.
  if (/Stream isn't writeable|Connection is closed/i.test(said)) return "not connected to it";
  if (/wrong version number|packet length too long|unknown protocol/i.test(said))
    return `the server does not speak TLS there (${said}): use redis:// for a plain port, rediss:// for a TLS one`;
  return said;
}
