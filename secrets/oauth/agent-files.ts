// The login files agents keep (docs/spec.md §19 "Import" and "Login"): where each agent keeps its
// sign-in, which catalogue provider it belongs to, how to find the token sets in it, and the
// file an agent starts signed in from. Read from the agents' public source (decision 165).
import { homedir } from "node:os";
import { join } from "node:path";
import type { StoredLogin } from "../../state/tokens/login.js";
import { jwtPayload, type PhantomKind, type Phantoms } from "./phantoms.js";

export type AgentName = "codex" | "claude" | "gemini" | "hermes";
export const AGENTS: readonly AgentName[] = ["codex", "claude", "gemini", "hermes"];

/** The provider an agent's own sign-in belongs to (hermes: named by its provider keys). */
export const AGENT_PROVIDER: Readonly<Record<AgentName, string | undefined>> = {
  codex: "codex-oauth",
  claude: "claude-oauth",
  gemini: "gemini-oauth",
  hermes: undefined,
};

/** hermes' provider names (and the agents' own) → catalogue provider. */
const PROVIDER_KEYS: Readonly<Record<string, string>> = {
  "openai-codex": "codex-oauth",
  codex: "codex-oauth",
  anthropic: "claude-oauth",
  claude: "claude-oauth",
  claudeAiOauth: "claude-oauth",
  gemini: "gemini-oauth",
  "google-gemini-cli": "gemini-oauth",
};

export function defaultAgentFile(agent: AgentName, env: NodeJS.ProcessEnv): string {
  const home = env.HOME ?? homedir();
  switch (agent) {
    case "codex":
      return join(env.CODEX_HOME ?? join(home, ".codex"), "auth.json");
    case "claude":
      return join(env.CLAUDE_CONFIG_DIR ?? join(home, ".claude"), ".credentials.json");
    case "gemini":
      return join(home, ".gemini", "oauth_creds.json");
    case "hermes":
      return join(env.HERMES_HOME ?? join(home, ".hermes"), "auth.json");
  }
}

const FIELDS: Readonly<Record<string, PhantomKind>> = {
  access_token: "access",
  accessToken: "access",
  refresh_token: "refresh",
  refreshToken: "refresh",
  id_token: "id",
  idToken: "id",
};

/** One token set found in an agent's file: the object holding it and the provider it is for. */
export interface TokenSet {
  readonly provider: string;
  readonly node: Record<string, unknown>;
  /** Where it sits in the file, for messages (`tokens`, `providers.openai-codex`). */
  readonly where: string;
}

/** Every object holding an access token, with the provider named by the nearest key that names one. */
export function findTokenSets(data: unknown, provider: string | undefined, where = ""): TokenSet[] {
  if (Array.isArray(data)) return data.flatMap((v, i) => findTokenSets(v, provider, `${where}[${i}]`));
  if (typeof data !== "object" || data === null) return [];
  const node = data as Record<string, unknown>;
  const named = typeof node.provider === "string" ? (PROVIDER_KEYS[node.provider] ?? provider) : provider;
  const access = node.access_token ?? node.accessToken;
  if (typeof access === "string" && access !== "" && named !== undefined)
    return [{ provider: named, node, where: where || "(top level)" }];
  return Object.entries(node).flatMap(([k, v]) =>
    findTokenSets(v, PROVIDER_KEYS[k] ?? named, where === "" ? k : `${where}.${k}`),
  );
}

const str = (v: unknown) => (typeof v === "string" && v !== "" ? v : undefined);

/** The tokens of a set, as a login's fields. */
export function tokensOf(set: TokenSet): {
  accessToken: string;
  refreshToken?: string;
  idToken?: string;
  expiresAt?: number;
  scope?: string;
} {
  const n = set.node;
  const accessToken = (str(n.access_token) ?? str(n.accessToken))!;
  const refreshToken = str(n.refresh_token) ?? str(n.refreshToken);
  const idToken = str(n.id_token) ?? str(n.idToken);
  // Milliseconds (Claude's expiresAt, Google's expiry_date), else the access JWT's exp.
  const ms = [n.expiresAt, n.expiry_date, n.expires_at].find((v) => typeof v === "number") as
    | number
    | undefined;
  const exp = jwtPayload(accessToken)?.exp;
  const expiresAt =
    ms !== undefined ? (ms < 1e12 ? ms * 1000 : ms) : typeof exp === "number" ? exp * 1000 : undefined;
  const scope = Array.isArray(n.scopes) ? n.scopes.join(" ") : str(n.scope);
  return {
    accessToken,
    ...(refreshToken === undefined ? {} : { refreshToken }),
    ...(idToken === undefined ? {} : { idToken }),
    ...(expiresAt === undefined ? {} : { expiresAt }),
    ...(scope === undefined ? {} : { scope }),
  };
}

/** Replaces each token of the set by its phantom for login `id`; returns how many were replaced. */
export function phantomize(phantoms: Phantoms, set: TokenSet, id: string): number {
  let n = 0;
  for (const [field, kind] of Object.entries(FIELDS)) {
    const real = set.node[field];
    if (typeof real !== "string" || real === "" || phantoms.read(real) !== undefined) continue;
    set.node[field] = phantoms.make(real, { provider: set.provider, id, kind });
    n++;
  }
  return n;
}

/** The login file an agent starts signed in from, holding phantoms of `login` only. */
export function agentFileFor(agent: AgentName, phantoms: Phantoms, login: StoredLogin): unknown {
  const b = { provider: login.provider, id: login.id };
  const access = phantoms.make(login.accessToken, { ...b, kind: "access" });
  const refresh = phantoms.make(login.refreshToken ?? `${login.accessToken}\0refresh`, {
    ...b,
    kind: "refresh",
  });
  const id = login.idToken === undefined ? undefined : phantoms.make(login.idToken, { ...b, kind: "id" });
  switch (agent) {
    case "codex":
      return {
        auth_mode: "chatgpt",
        OPENAI_API_KEY: null,
        tokens: {
          id_token: id ?? null,
          access_token: access,
          refresh_token: refresh,
          account_id: login.account ?? null,
        },
        last_refresh: new Date(login.refreshedAt ?? login.issuedAt).toISOString(),
      };
    case "claude":
      return {
        claudeAiOauth: {
          accessToken: access,
          refreshToken: refresh,
          expiresAt: login.expiresAt ?? null,
          scopes: (login.scope ?? "").split(" ").filter((s) => s !== ""),
        },
      };
    case "gemini":
      return {
        access_token: access,
        refresh_token: refresh,
        scope: login.scope ?? "",
        token_type: "Bearer",
        ...(id === undefined ? {} : { id_token: id }),
        expiry_date: login.expiresAt ?? null,
      };
    case "hermes":
      return {
        version: 1,
        providers: { [login.provider]: { access_token: access, refresh_token: refresh } },
      };
  }
}
