// AWS Signature Version 4 (docs/spec.md §9), with a maintained signer (@smithy/signature-v4): the
// request is signed after every other header change, over the final headers and the payload's
// hash. The client's own (dummy) signature headers are dropped first.
import { Hash } from "@smithy/hash-node";
import { SignatureV4 } from "@smithy/signature-v4";

/** Headers a client's SDK adds for its own signature: never forwarded. */
export const CLIENT_SIGNING_HEADERS = new Set([
  "authorization",
  "x-amz-date",
  "x-amz-security-token",
  "x-amz-content-sha256",
]);

/** Headers that must not be signed: changed by proxies or set by the transport. */
const UNSIGNABLE = new Set(["connection", "expect", "user-agent", "x-amzn-trace-id", "content-length"]);

export interface AwsCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string | undefined;
}

export interface SignInput {
  readonly method: string;
  readonly host: string;
  readonly port: number;
  /** Path and query as sent upstream. */
  readonly path: string;
  /** Flat lower-case header list, `host` included. */
  readonly headers: readonly string[];
  /** The payload, or undefined to sign it as UNSIGNED-PAYLOAD. */
  readonly body: Buffer | undefined;
}

async function payloadHash(body: Buffer): Promise<string> {
  const hash = new Hash("sha256");
  hash.update(body);
  return Buffer.from(await hash.digest()).toString("hex");
}

function splitQuery(path: string): { path: string; query: Record<string, string | string[]> } {
  const q = path.indexOf("?");
  if (q === -1) return { path, query: {} };
  const query: Record<string, string | string[]> = {};
  for (const [k, v] of new URLSearchParams(path.slice(q + 1))) {
    const prev = query[k];
    query[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return { path: path.slice(0, q), query };
}

/** Returns the headers to send: the input's minus client signing headers, plus the signature. */
export async function signSigV4(
  input: SignInput,
  region: string,
  service: string,
  credentials: AwsCredentials,
  now = new Date(),
): Promise<string[]> {
  const headers: Record<string, string> = {};
  for (let i = 0; i < input.headers.length; i += 2) {
    const name = input.headers[i]!;
    if (CLIENT_SIGNING_HEADERS.has(name)) continue;
    const value = input.headers[i + 1]!;
    headers[name] = headers[name] === undefined ? value : `${headers[name]},${value}`;
  }
  headers.host ??= input.port === 443 ? input.host : `${input.host}:${input.port}`;
  headers["x-amz-content-sha256"] =
    input.body === undefined ? "UNSIGNED-PAYLOAD" : await payloadHash(input.body);
  const signer = new SignatureV4({
    credentials: {
      accessKeyId: credentials.accessKeyId,
      secretAccessKey: credentials.secretAccessKey,
      ...(credentials.sessionToken ? { sessionToken: credentials.sessionToken } : {}),
    },
    region,
    service,
    sha256: Hash.bind(null, "sha256"),
    uriEscapePath: service !== "s3",
  });
  const { path, query } = splitQuery(input.path);
  const signed = await signer.sign(
    {
      method: input.method,
      protocol: "https:",
      hostname: input.host,
      path,
      query,
      headers,
      ...(input.port === 443 ? {} : { port: input.port }),
    },
    { signingDate: now, unsignableHeaders: UNSIGNABLE },
  );
  const out: string[] = [];
  for (const [name, value] of Object.entries(signed.headers)) out.push(name.toLowerCase(), String(value));
  return out;
}
