// Phantom tokens (docs/spec.md §19): what an agent holds in place of each token of a login keybroker
// keeps. A phantom names its login and what it stands for, and is signed with a key derived
// from the home's key, so it is recognised by computation alone: no table, no disk read, no
// lock per request, the same in every broker of a home or a fleet (decision 162).
//
// - A JWT's phantom keeps the real token's header claims and payload (an agent reads `exp`,
//   an account id or a plan from them), with `kbl` (the binding) first in the header, `alg`
//   HS256, and keybroker's signature in place of the provider's.
// - Any other token's phantom is `<the real token's well-known prefix>kbph_<binding>.<mac>`.
//
// A phantom maps to its login, not to one real value: after keybroker refreshes the login,
// phantoms handed out earlier still stand for its current token.
import { createHmac } from "node:crypto";
import { sameToken } from "../../core/same-token.js";

export type PhantomKind = "access" | "refresh" | "id" | "api_key";
const KINDS: readonly PhantomKind[] = ["access", "refresh", "id", "api_key"];

export interface PhantomBinding {
  readonly provider: string;
  /** The login's id (its label). */
  readonly id: string;
  readonly kind: PhantomKind;
}

/** The start of every phantom JWT: base64url of `{"kbl":`. */
const JWT_MARK = "eyJrYmwiOi";
/** The length of PHANTOM_PATTERN's shortest match. */
const SHORTEST_PHANTOM = "kbph_".length + 4 + 1 + 22;
/** Prefixes agents and servers may look for, kept in front of an opaque phantom. */
const KEPT_PREFIX = /^(?:sk-ant-[a-z]{3}\d\d-|ya29\.|1\/\/)/;

/** Every phantom in a text (its whole spelling, prefix included). */
export const PHANTOM_PATTERN =
  /(?:sk-ant-[a-z]{3}\d\d-|ya29\.|1\/\/)?kbph_[A-Za-z0-9_-]{4,400}\.[A-Za-z0-9_-]{22}|eyJrYmwiOi[A-Za-z0-9_-]{4,4000}\.[A-Za-z0-9_-]{0,20000}\.[A-Za-z0-9_-]{43}/g;

const b64 = (s: string | Buffer) => Buffer.from(s).toString("base64url");

function decodeJson(part: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(part, "base64url").toString("utf8"));
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** The payload of a JWT (any signer's), or undefined for a token that is not one. */
export function jwtPayload(token: string): Record<string, unknown> | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || decodeJson(parts[0]!) === undefined) return undefined;
  return decodeJson(parts[1]!);
}

function bindingText(b: PhantomBinding): string {
  return `${b.provider}/${b.id}/${b.kind}`;
}

function parseBinding(text: unknown): PhantomBinding | undefined {
  if (typeof text !== "string") return undefined;
  const [provider, id, kind, ...rest] = text.split("/");
  if (provider === undefined || id === undefined || rest.length > 0) return undefined;
  if (!KINDS.includes(kind as PhantomKind) || provider === "" || id === "") return undefined;
  return { provider, id, kind: kind as PhantomKind };
}

export class Phantoms {
  readonly #key: Buffer;

  constructor(homeKey: Buffer) {
    this.#key = createHmac("sha256", homeKey).update("phantom tokens\0v1").digest();
  }

  #mac(text: string): Buffer {
    return createHmac("sha256", this.#key).update(text).digest();
  }

  /** The phantom of `real` for the login and use `b`: a JWT's keeps its claims. */
  make(real: string, b: PhantomBinding): string {
    const parts = real.split(".");
    const header = parts.length === 3 ? decodeJson(parts[0]!) : undefined;
    if (header !== undefined && decodeJson(parts[1]!) !== undefined) {
      const { kbl: _drop, alg: _alg, ...kept } = header;
      const signed = `${b64(JSON.stringify({ kbl: bindingText(b), ...kept, alg: "HS256" }))}.${parts[1]}`;
      return `${signed}.${this.#mac(signed).toString("base64url")}`;
    }
    const prefix = KEPT_PREFIX.exec(real)?.[0] ?? "";
    // The same real token always gets the same phantom (an import run twice changes nothing).
    const nonce = this.#mac(`nonce\0${real}`).subarray(0, 9).toString("base64url");
    const body = `${prefix}kbph_${b64(`${bindingText(b)}/${nonce}`)}`;
    return `${body}.${this.#mac(body).subarray(0, 16).toString("base64url")}`;
  }

  /** The login and use a phantom stands for; undefined for anything that is not one of ours. */
  read(token: string): PhantomBinding | undefined {
    if (token.startsWith(JWT_MARK)) {
      const parts = token.split(".");
      if (parts.length !== 3 || !this.#same(parts[2]!, this.#mac(`${parts[0]}.${parts[1]}`)))
        return undefined;
      return parseBinding(decodeJson(parts[0]!)?.kbl);
    }
    const dot = token.lastIndexOf(".");
    const at = token.indexOf("kbph_");
    if (at === -1 || dot < at) return undefined;
    const body = token.slice(0, dot);
    if (!this.#same(token.slice(dot + 1), this.#mac(body).subarray(0, 16))) return undefined;
    const text = Buffer.from(body.slice(at + 5), "base64url").toString("utf8");
    return parseBinding(text.slice(0, text.lastIndexOf("/")));
  }

  /**
   * Whether `given` is the MAC's own base64url text. Compared as text, not decoded: a decoder
   * ignores the spare low bits of the last character, so 16 spellings of a 16-byte MAC (4 of a
   * 32-byte one) would otherwise all pass, and a phantom would not be one exact string.
   */
  #same(given: string, mac: Buffer): boolean {
    return sameToken(given, mac.toString("base64url"));
  }

  /** Every phantom of ours in `text`, with what it stands for. */
  find(text: string): { token: string; binding: PhantomBinding }[] {
    if (!text.includes("kbph_") && !text.includes(JWT_MARK)) return [];
    const out: { token: string; binding: PhantomBinding }[] = [];
    for (const m of text.matchAll(PHANTOM_PATTERN)) {
      const binding = this.read(m[0]);
      if (binding !== undefined) out.push({ token: m[0], binding });
    }
    return out;
  }

  /**
   * Whether a text holds anything shaped like a phantom (ours or not): cheap, no regex. The
   * shortest text PHANTOM_PATTERN matches is `kbph_`, 4 characters, a dot and a 22-character
   * MAC: most header values are shorter, and need no search (decision 190).
   */
  static mayHold(text: string): boolean {
    return text.length >= SHORTEST_PHANTOM && (text.includes("kbph_") || text.includes(JWT_MARK));
  }
}
