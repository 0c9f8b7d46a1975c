// What differs between the ways a provider authenticates (decision 132). A provider's kind is
// chosen once, when the rules compile (`chooseKind`), and stored on the compiled rule; code
// that needs to know asks the kind (`kindOf(rule)` in index.ts) instead of looking at which of
// `auth`, `oauth` and `mcp` the rule file wrote. Behaviour that needs the secrets code (minting
// a token, signing a request) lives there, in one exhaustive switch on `rule.kind` per concern.
import type { ProviderInput } from "../schema/index.js";
import type { ProviderRule } from "../types.js";

/** The six kinds, as `check --json` and the decision log name them. */
export type ProviderKindName =
  | "key_pool"
  | "oauth_login"
  | "client_credentials"
  | "mcp"
  | "google_service_account"
  | "aws_sigv4";

export interface ProviderKind {
  readonly name: ProviderKindName;
  /**
   * The pool's members are OAuth logins kept in the token store (docs/spec.md §8), not the rule's
   * credential references: its ids are login ids, an upstream 401 refreshes the login's token.
   */
  readonly poolOfLogins: boolean;
  /** `keybroker auth add` logs a person in for it (device code or PKCE). */
  readonly personLogins: boolean;
  /** Each login is bound to the client made for it at the server (docs/spec.md §15); the binding goes with it. */
  readonly boundLogins: boolean;
  /**
   * A signer authorizes its requests last (docs/spec.md §9), not a pool member's value: no member is
   * picked, the body is kept for a replay, a refused token is minted again once.
   */
  readonly signed: boolean;
  /**
   * Its key is a value the agent might hold: without `credentials:`, it is read from the
   * placeholder variable and its aliases (decision 122), and `check` names a derived variable.
   */
  readonly keyFromPlaceholder: boolean;
  /**
   * It answers for its host as a whole (docs/spec.md §15): every request there gets its token,
   * placeholder or not, so no other provider shares the host; its challenge never reaches the
   * agent, and a refused login is keybroker's own `reauth_required`.
   */
  readonly wholeHost: boolean;
  /** The main placeholder variable when neither the entry nor the catalogue names one. */
  derivedEnv(id: string): string;
  /** A service account's parts (credential references); none for the other kinds. */
  signingRefs(rule: ProviderRule): readonly string[];
  /** The references resolved when the rules load: the pool's credentials, or the signer's parts. */
  loadRefs(rule: ProviderRule): readonly string[];
  /**
   * Whether it can serve, given how many of its load-time references resolved: a pool needs
   * one, a service account all of them; logins come and go with the token store, so a kind
   * with logins always serves.
   */
  active(resolved: number, total: number): boolean;
  /** What `status` says about how it authenticates, beside its credentials; undefined for nothing. */
  statusNote(rule: ProviderRule): string | undefined;
}

/** The rule-file keys that choose a kind, as an entry (merged with its catalogue entry) writes them. */
export type KindKeys = Pick<ProviderInput, "mcp" | "oauth" | "auth">;

/** The one place a provider's kind is read from the rule file's keys. */
export function chooseKind(entry: KindKeys): ProviderKindName {
  if (entry.mcp !== undefined) return "mcp";
  if (entry.oauth !== undefined) {
    return entry.oauth.grant === "client_credentials" ? "client_credentials" : "oauth_login";
  }
  if (entry.auth?.google_service_account !== undefined) return "google_service_account";
  if (entry.auth?.aws_sigv4 !== undefined) return "aws_sigv4";
  return "key_pool";
}

/**
 * The `default:` of a `switch (rule.kind)` (given the rule, or the kind when the switch is on a
 * name): a kind the switch forgot is a type error here, and an error at run time if it ever got
 * through.
 */
export function unhandledKind(kindOrRule: never): never {
  const value = kindOrRule as unknown;
  const kind = typeof value === "object" && value !== null ? (value as { kind?: unknown }).kind : value;
  throw new Error(`provider kind ${String(kind)} is not handled here`);
}
