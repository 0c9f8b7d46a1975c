// `keybroker auth import <agent> [--file F]` and `keybroker auth phantom <provider> --for
// <agent>` (docs/spec.md §19): an agent's existing sign-in taken into the token store, its file
// rewritten in place with phantoms (atomic, same mode); a login file (or the variable) holding
// phantoms only, for an agent that starts signed in without seeing a real token.

import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { UserError } from "../../core/errors.js";
import { writeFileAtomic } from "../../core/fs.js";
import { homeKey } from "../../core/home.js";
import { isOAuthRule } from "../../rules/kinds/index.js";
import type { Rules } from "../../rules/types.js";
import {
  AGENT_PROVIDER,
  AGENTS,
  type AgentName,
  agentFileFor,
  defaultAgentFile,
  findTokenSets,
  phantomize,
  tokensOf,
} from "../../secrets/oauth/agent-files.js";
import { accountOf } from "../../secrets/oauth/capture.js";
import { Phantoms } from "../../secrets/oauth/phantoms.js";
import { DEFAULT_LABEL, type StoredLogin } from "../../state/tokens/login.js";
import type { TokenStore } from "../../state/tokens/store.js";
import type { Context } from "../context.js";
import { openTokenStore } from "../token-store.js";

function agentOf(name: string | undefined): AgentName {
  if (name === undefined || !AGENTS.includes(name as AgentName)) {
    throw new UserError(`name the agent: keybroker auth import ${AGENTS.join("|")} [--file F]`);
  }
  return name as AgentName;
}

/** The label of an imported login: the one of the same account, else `default`, else `import-N`. */
async function labelFor(
  store: TokenStore,
  provider: string,
  account: string | undefined,
  taken: Set<string>,
) {
  const held = await store.list(provider);
  const same = account === undefined ? undefined : held.find((l) => l.account === account);
  if (same !== undefined) return same.id;
  const ids = new Set([...held.map((l) => l.id), ...taken]);
  if (!ids.has(DEFAULT_LABEL)) return DEFAULT_LABEL;
  for (let n = 2; ; n++) if (!ids.has(`import-${n}`)) return `import-${n}`;
}

export async function importAgent(ctx: Context, rules: Rules, name: string | undefined, file?: string) {
  const agent = agentOf(name);
  const path = file ?? defaultAgentFile(agent, ctx.env);
  if (!existsSync(path))
    throw new UserError(`${path} does not exist: sign ${agent} in first, or name its file with --file`);
  const mode = statSync(path).mode & 0o777;
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new UserError(`${path} is not JSON (${(err as Error).message}); nothing was changed`);
  }
  const phantoms = new Phantoms(homeKey(ctx.home));
  const sets = findTokenSets(data, AGENT_PROVIDER[agent]);
  for (const s of sets) {
    if (!rules.providers.some((p) => p.id === s.provider && isOAuthRule(p)))
      throw new UserError(
        `${path}: ${s.where} is a ${s.provider} sign-in, and the rules have no OAuth provider ${s.provider}`,
      );
  }
  if (sets.length === 0)
    throw new UserError(`${path} holds no sign-in keybroker knows (no access token); nothing was changed`);
  const { store, close } = await openTokenStore(ctx, rules);
  const lines: string[] = [];
  try {
    const taken = new Set<string>();
    for (const s of sets) {
      const t = tokensOf(s);
      const bound = phantoms.read(t.accessToken);
      if (bound !== undefined) {
        lines.push(`${s.where}: already phantoms of ${bound.provider}/${bound.id}; unchanged`);
        continue;
      }
      const account = accountOf(s.node, t.idToken);
      const id = await labelFor(store, s.provider, account, taken);
      taken.add(id);
      const now = Date.now();
      const login: StoredLogin = {
        provider: s.provider,
        id,
        ...t,
        ...(account === undefined ? {} : { account }),
        issuedAt: now,
        createdAt: now,
        generation: 1,
        state: "ok",
      };
      // The token store first: if anything fails after, the agent's file still works as it was.
      await store.put(login);
      const n = phantomize(phantoms, s, id);
      lines.push(`${s.where}: ${n} token${n === 1 ? "" : "s"} replaced by phantoms of ${s.provider}/${id}`);
    }
    // Codex keeps the API key its id token was exchanged for: it goes too (decision 164).
    const root = data as Record<string, unknown>;
    if (
      agent === "codex" &&
      typeof root.OPENAI_API_KEY === "string" &&
      phantoms.read(root.OPENAI_API_KEY) === undefined
    ) {
      root.OPENAI_API_KEY = phantoms.make(root.OPENAI_API_KEY, {
        provider: "codex-oauth",
        id: "default",
        kind: "api_key",
      });
      lines.push(
        "OPENAI_API_KEY: replaced by an inert phantom (Codex signed in with ChatGPT does not use it)",
      );
    }
  } finally {
    await close();
  }
  writeFileAtomic(path, `${JSON.stringify(data, null, 2)}\n`, mode);
  ctx.out(`${agent}: ${path}`);
  for (const l of lines) ctx.out(`  ${l}`);
  ctx.out(
    `Run the agent under keybroker (keybroker run -- ${agent === "claude" ? "claude" : agent}): its phantoms work only through it.`,
  );
  return 0;
}

export async function writePhantom(
  ctx: Context,
  rules: Rules,
  provider: string,
  opts: { agent: string | undefined; file: string | undefined; credential: string | undefined },
) {
  const agent = agentOf(opts.agent);
  const { store, close } = await openTokenStore(ctx, rules);
  let login: StoredLogin | undefined;
  try {
    const logins = await store.list(provider);
    login = opts.credential === undefined ? logins[0] : logins.find((l) => l.id === opts.credential);
  } finally {
    await close();
  }
  if (login === undefined) {
    throw new UserError(
      `${provider} has no login${opts.credential === undefined ? "" : ` "${opts.credential}"`}: run keybroker auth add ${provider}, or keybroker auth import`,
    );
  }
  const phantoms = new Phantoms(homeKey(ctx.home));
  if (agent === "claude" && opts.file === undefined) {
    // Claude Code reads an access token (no refresh) from this variable.
    ctx.out(
      `CLAUDE_CODE_OAUTH_TOKEN=${phantoms.make(login.accessToken, { provider, id: login.id, kind: "access" })}`,
    );
    return 0;
  }
  const path = opts.file ?? defaultAgentFile(agent, ctx.env);
  if (!existsSync(dirname(path))) mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileAtomic(path, `${JSON.stringify(agentFileFor(agent, phantoms, login), null, 2)}\n`, 0o600);
  ctx.out(`${agent}: wrote ${path} with phantoms of ${provider}/${login.id}`);
  return 0;
}
