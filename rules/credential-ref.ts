// Credential references: how a rule file names where a secret comes from, never the secret.
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { suggest } from "./errors.js";

export type CredentialRef =
  /** A bare name: looked up through `sources.order`, the environment last. */
  | { readonly kind: "name"; readonly name: string }
  | { readonly kind: "env"; readonly name: string }
  | { readonly kind: "dotenv"; readonly name: string }
  | { readonly kind: "file"; readonly path: string }
  /** `infisical:/folder/sub/NAME`: `folder` is `/folder/sub` (or `/`). */
  | { readonly kind: "infisical"; readonly folder: string; readonly name: string }
  | { readonly kind: "cmd"; readonly command: string };

export const CREDENTIAL_REF_FORMS =
  "NAME, env:NAME, dotenv:NAME, file:PATH, infisical:/path/NAME or cmd:<command line>";

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const INFISICAL = /^((?:\/[A-Za-z0-9_.-]+)*)\/([A-Za-z_][A-Za-z0-9_-]*)$/;
const SOURCES = ["env", "dotenv", "file", "infisical", "cmd"] as const;

export class CredentialRefError extends Error {
  override readonly name = "CredentialRefError";
}

/**
 * Parses a credential reference. The error message never repeats the text, which may be a
 * secret pasted by mistake.
 */
export function parseCredentialRef(ref: string): CredentialRef {
  if (NAME.test(ref)) return { kind: "name", name: ref };
  const prefix = /^([A-Za-z][A-Za-z0-9_-]{0,15}):/.exec(ref)?.[1];
  const rest = prefix === undefined ? "" : ref.slice(prefix.length + 1);
  switch (prefix) {
    case "env":
    case "dotenv":
      if (!NAME.test(rest)) {
        throw new CredentialRefError(
          `${prefix}: needs a variable name ([A-Za-z_][A-Za-z0-9_]*), as in ${prefix}:OPENAI_API_KEY`,
        );
      }
      return { kind: prefix, name: rest };
    case "file":
      if (rest.trim() === "" || rest.includes("\0"))
        throw new CredentialRefError("file: needs a path, as in file:/run/secrets/openai");
      if (/^~[^/]/.test(rest))
        throw new CredentialRefError(
          "file: supports ~/ for your home folder, not ~user — write the full path",
        );
      return { kind: "file", path: rest };
    case "infisical": {
      const match = INFISICAL.exec(rest);
      if (!match) {
        throw new CredentialRefError(
          "infisical: needs an absolute secret path, as in infisical:/llm/ANTHROPIC_API_KEY",
        );
      }
      return { kind: "infisical", folder: match[1] === "" ? "/" : (match[1] ?? "/"), name: match[2] ?? "" };
    }
    case "cmd":
      if (rest.trim() === "")
        throw new CredentialRefError("cmd: needs a command line, as in cmd:pass show openai");
      return { kind: "cmd", command: rest };
  }
  const forms = `write ${CREDENTIAL_REF_FORMS}`;
  if (prefix !== undefined && !/^[a-z]+:\/\//i.test(ref)) {
    const close = suggest(prefix, SOURCES);
    const hint = close === undefined ? "" : ` (did you mean "${close}:"?)`;
    throw new CredentialRefError(`unknown credential source "${prefix}:"${hint} — ${forms}`);
  }
  const looksSecret = ref.length >= 16 && !/\s/.test(ref);
  throw new CredentialRefError(
    `not a credential reference (value not shown) — ${forms}` +
      (looksSecret ? "; never put a secret itself in the rule file" : ""),
  );
}

/**
 * The reference with a `file:` path made absolute: `~/` is the user's home folder, a relative
 * path is taken from `baseDir` (the rule file's folder). Other references are returned as is.
 */
export function absoluteCredentialRef(ref: string, baseDir: string, userHome = homedir()): string {
  if (!ref.startsWith("file:")) return ref;
  return `file:${absolutePath(ref.slice("file:".length), baseDir, userHome)}`;
}

/** `~/x` → home/x, relative → from `baseDir`, absolute unchanged (normalized). */
export function absolutePath(path: string, baseDir: string, userHome = homedir()): string {
  if (path === "~") return userHome;
  if (path.startsWith("~/")) return join(userHome, path.slice(2));
  return isAbsolute(path) ? resolve(path) : resolve(baseDir, path);
}

/** A reference split at its source prefix, without checking the rest (the resolver's reading). */
export interface ParsedRef {
  /** undefined for a bare name (the lookup chain). */
  readonly source: string | undefined;
  readonly key: string;
}

export function parseRef(ref: string): ParsedRef {
  const colon = ref.indexOf(":");
  if (colon > 0) {
    const prefix = ref.slice(0, colon);
    if ((SOURCES as readonly string[]).includes(prefix)) {
      let key = ref.slice(colon + 1);
      if (prefix === "file" && (key === "~" || key.startsWith("~/"))) key = homedir() + key.slice(1);
      return { source: prefix, key };
    }
  }
  return { source: undefined, key: ref };
}
