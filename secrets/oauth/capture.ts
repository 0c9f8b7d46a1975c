// Taking an agent's own sign-in into custody (docs/spec.md §19): the token endpoint's answer becomes a
// login of the provider (state/tokens, as `auth add` makes one), and the agent gets the same
// answer with every token that can authenticate replaced by its phantom.
import { createHash } from "node:crypto";
import { newLogin, type StoredLogin } from "../../state/tokens/login.js";
import type { OAuthLogins } from "./logins.js";
import { jwtPayload, type PhantomKind, type Phantoms } from "./phantoms.js";

/** The fields of a token answer that authenticate, and what each one's phantom stands for. */
export const TOKEN_FIELDS: Readonly<Record<string, PhantomKind>> = {
  access_token: "access",
  refresh_token: "refresh",
  id_token: "id",
};

/** Seconds until `exp` of a JWT, when the answer gave no `expires_in` (Codex's tokens). */
function expiresInOf(answer: Record<string, unknown>, access: string, now: number): number | undefined {
  if (typeof answer.expires_in === "number" && Number.isFinite(answer.expires_in)) return answer.expires_in;
  const exp = jwtPayload(access)?.exp;
  return typeof exp === "number" ? Math.max(0, Math.floor(exp - now / 1000)) : undefined;
}

/** Who signed in, from the id token's claims or the answer's account (never a token). */
export function accountOf(answer: Record<string, unknown>, idToken: string | undefined): string | undefined {
  const access = answer.access_token ?? answer.accessToken;
  const claims =
    (idToken === undefined ? undefined : jwtPayload(idToken)) ??
    (typeof access === "string" ? jwtPayload(access) : undefined) ??
    {};
  const openai = claims["https://api.openai.com/auth"] as Record<string, unknown> | undefined;
  const account = answer.account as Record<string, unknown> | undefined;
  for (const v of [
    openai?.chatgpt_account_id,
    account?.uuid,
    account?.email_address,
    claims.email,
    claims.sub,
  ]) {
    if (typeof v === "string" && v !== "") return v.slice(0, 200);
  }
  return undefined;
}

/**
 * The label of a captured login: the login of the same account when there is one, `default`
 * when the provider has none yet, else one named after the account (decision 163).
 */
export function labelFor(logins: OAuthLogins, provider: string, account: string | undefined): string {
  const held = logins.members(provider);
  const same = account === undefined ? undefined : held.find((e) => e.login.account === account);
  if (same !== undefined) return same.login.id;
  if (held.length === 0 || account === undefined) return "default";
  return `acct-${createHash("sha256").update(account).digest("hex").slice(0, 10)}`;
}

/**
 * A login from a token endpoint's answer; undefined when the answer holds no access token.
 * `apiBaseField` is the provider's `oauth.api_base_field`: the API the answer names is kept.
 */
export function loginFromAnswer(
  provider: string,
  id: string,
  answer: Record<string, unknown>,
  now = Date.now(),
  apiBaseField?: string,
): StoredLogin | undefined {
  const access = answer.access_token;
  if (typeof access !== "string" || access === "") return undefined;
  const str = (k: string) =>
    typeof answer[k] === "string" && answer[k] !== "" ? (answer[k] as string) : undefined;
  const idToken = str("id_token");
  const account = accountOf(answer, idToken);
  const login = newLogin(
    provider,
    id,
    {
      accessToken: access,
      refreshToken: str("refresh_token"),
      idToken,
      expiresIn: expiresInOf(answer, access, now),
      scope: str("scope"),
      apiBase: apiBaseField === undefined ? undefined : str(apiBaseField),
    },
    now,
  );
  return account === undefined ? login : { ...login, account };
}

/** The answer with each token replaced by the phantom of `login`'s corresponding token. */
export function phantomAnswer(
  phantoms: Phantoms,
  answer: Record<string, unknown>,
  provider: string,
  id: string,
): Record<string, unknown> {
  const out = { ...answer };
  for (const [field, kind] of Object.entries(TOKEN_FIELDS)) {
    const real = out[field];
    if (typeof real === "string" && real !== "") out[field] = phantoms.make(real, { provider, id, kind });
  }
  return out;
}

/**
 * The answer keybroker gives a refresh it answers itself: the login's current tokens, each as
 * its phantom, in the shape of a token endpoint's answer (RFC 6749 §5.1), with the API the
 * login is served at under `apiBaseField` (Qwen Code falls back to another API without it).
 */
export function answerFromLogin(
  phantoms: Phantoms,
  login: StoredLogin,
  now = Date.now(),
  apiBaseField?: string,
): Record<string, unknown> {
  const b = { provider: login.provider, id: login.id };
  return {
    access_token: phantoms.make(login.accessToken, { ...b, kind: "access" }),
    token_type: "Bearer",
    ...(login.expiresAt === undefined
      ? {}
      : { expires_in: Math.max(0, Math.floor((login.expiresAt - now) / 1000)) }),
    refresh_token: phantoms.make(login.refreshToken ?? `${login.accessToken}\0refresh`, {
      ...b,
      kind: "refresh",
    }),
    ...(login.idToken === undefined ? {} : { id_token: phantoms.make(login.idToken, { ...b, kind: "id" }) }),
    ...(login.scope === undefined ? {} : { scope: login.scope }),
    ...(apiBaseField === undefined || login.apiBase === undefined ? {} : { [apiBaseField]: login.apiBase }),
  };
}
