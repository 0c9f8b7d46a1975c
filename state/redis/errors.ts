// What went wrong with the fleet's Redis, said so that the fix is plain: OpenSSL's and Redis's
// words turned into the step to take, and a command's failure reported as the store's.

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

/** A Redis command's answer; its failure is also a health signal, and an error that says where. */
export async function fromRedis<T>(op: Promise<T>, onError: (err: Error) => void): Promise<T> {
  try {
    return await op;
  } catch (err) {
    onError(err as Error);
    throw new Error(`the fleet's Redis did not answer: ${redisErrorText(err as Error)}`, { cause: err });
  }
}
