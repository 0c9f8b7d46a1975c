// One OAuth login as kept in the token store: the tokens `auth add` (or a refresh) obtained for
// one credential of a provider's pool. Only this file's helpers turn it into text; everything
// that prints a login prints `describeLogin`, which never holds a token.

export type LoginState = "ok" | "reauth_required";

export interface StoredLogin {
  readonly provider: string;
  /** The credential id in the provider's pool: the `--label` given to `auth add`. */
  readonly id: string;
  readonly accessToken: string;
  readonly refreshToken?: string;
  /** The OpenID id token the server gave with the tokens, for the agents that read it (docs/spec.md §19). */
  readonly idToken?: string;
  /** Who signed in (an account id or e-mail read from the id token), never a secret. */
  readonly account?: string;
  /**
   * The API the server said this login is served at (Qwen's `resource_url`, Nous Portal's
   * `inference_base_url`; decision 174), never a secret.
   */
  readonly apiBase?: string;
  /** Epoch ms when the access token expires; undefined when the server did not say. */
  readonly expiresAt?: number;
  /** When the current access token was obtained (epoch ms): the lifetime is expiresAt - issuedAt. */
  readonly issuedAt: number;
  readonly scope?: string;
  readonly createdAt: number;
  readonly refreshedAt?: number;
  /** Raised on every write: a refresh stores its answer only over the generation it started from. */
  readonly generation: number;
  readonly state: LoginState;
  /** Why the login needs a person (error code of the token endpoint), never a value. */
  readonly reason?: string;
  /**
   * Set before a refresh token is sent, cleared when its answer is stored: a refresh found
   * pending after a crash is tried once more at most (docs/spec.md §8).
   */
  readonly refreshSentAt?: number;
  /** How many times the pending refresh token has been sent. */
  readonly refreshAttempts?: number;
}

/** A label names a login: letters, digits, `.`, `_`, `-` (it is part of a file name). */
export const LABEL = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const DEFAULT_LABEL = "default";

export function checkLabel(label: string): string {
  if (!LABEL.test(label)) {
    throw new Error(
      `the label "${label.slice(0, 70)}" is not valid: use up to 64 letters, digits, ".", "_" or "-"`,
    );
  }
  return label;
}

/** A fresh login from the tokens a login flow obtained (`auth add`, the admin page). */
export function newLogin(
  provider: string,
  id: string,
  tokens: {
    readonly accessToken: string;
    readonly refreshToken?: string | undefined;
    readonly idToken?: string | undefined;
    readonly expiresIn?: number | undefined;
    readonly scope?: string | undefined;
    readonly apiBase?: string | undefined;
  },
  now = Date.now(),
): StoredLogin {
  return {
    provider,
    id,
    accessToken: tokens.accessToken,
    ...(tokens.refreshToken === undefined ? {} : { refreshToken: tokens.refreshToken }),
    ...(tokens.idToken === undefined ? {} : { idToken: tokens.idToken }),
    ...(tokens.apiBase === undefined ? {} : { apiBase: tokens.apiBase }),
    ...(tokens.expiresIn === undefined ? {} : { expiresAt: now + tokens.expiresIn * 1000 }),
    issuedAt: now,
    ...(tokens.scope === undefined ? {} : { scope: tokens.scope }),
    createdAt: now,
    generation: 1,
    state: "ok",
  };
}

/** What may be shown of a login: its id, state, expiry and last refresh, never a token. */
export interface LoginSummary {
  readonly id: string;
  readonly state: LoginState;
  readonly reason?: string;
  readonly expiresAt?: string;
  readonly refreshedAt?: string;
  readonly createdAt: string;
  readonly refreshable: boolean;
}

export function describeLogin(login: StoredLogin): LoginSummary {
  const iso = (t: number | undefined) => (t === undefined ? undefined : new Date(t).toISOString());
  const expiresAt = iso(login.expiresAt);
  const refreshedAt = iso(login.refreshedAt);
  return {
    id: login.id,
    state: login.state,
    ...(login.reason === undefined ? {} : { reason: login.reason }),
    ...(expiresAt === undefined ? {} : { expiresAt }),
    ...(refreshedAt === undefined ? {} : { refreshedAt }),
    createdAt: new Date(login.createdAt).toISOString(),
    refreshable: login.refreshToken !== undefined,
  };
}

/** Reads a stored login back; undefined when the text is not one (a torn or foreign file). */
export function parseLogin(text: string): StoredLogin | undefined {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof data !== "object" || data === null) return undefined;
  const d = data as Record<string, unknown>;
  const str = (k: string) => (typeof d[k] === "string" ? (d[k] as string) : undefined);
  const num = (k: string) =>
    typeof d[k] === "number" && Number.isFinite(d[k]) ? (d[k] as number) : undefined;
  const provider = str("provider");
  const id = str("id");
  const accessToken = str("accessToken");
  if (d.version !== 1 || provider === undefined || id === undefined || accessToken === undefined)
    return undefined;
  const state = d.state === "reauth_required" ? "reauth_required" : "ok";
  const optional = <K extends string, V>(key: K, value: V | undefined) =>
    (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
  return {
    provider,
    id,
    accessToken,
    ...optional("refreshToken", str("refreshToken")),
    ...optional("idToken", str("idToken")),
    ...optional("account", str("account")),
    ...optional("apiBase", str("apiBase")),
    ...optional("expiresAt", num("expiresAt")),
    issuedAt: num("issuedAt") ?? num("createdAt") ?? 0,
    ...optional("scope", str("scope")),
    createdAt: num("createdAt") ?? 0,
    ...optional("refreshedAt", num("refreshedAt")),
    generation: num("generation") ?? 0,
    state,
    ...optional("reason", str("reason")),
    ...optional("refreshSentAt", num("refreshSentAt")),
    ...optional("refreshAttempts", num("refreshAttempts")),
  };
}

export function serializeLogin(login: StoredLogin): string {
  return `${JSON.stringify({ version: 1, ...login }, null, 2)}\n`;
}
