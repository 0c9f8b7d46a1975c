import { UserError } from "../../core/errors.js";
import { isOAuthRule, kindOf } from "../../rules/kinds/index.js";
import type { Rules } from "../../rules/types.js";
import { PoolState } from "../../secrets/pool.js";
import { openSharedState } from "../../state/shared-state.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { warnNotBrokersRules } from "../config-flag.js";
import { brokerPort, type Context, createContext, findRunningBroker } from "../context.js";
import { notOnPortError } from "../port-probe.js";
import { readRules } from "../read-rules.js";
import { openTokenStore, sharedStateOptions } from "../token-store.js";
import { importAgent, writePhantom } from "./auth-import.js";
import { addLogin, removeLogin } from "./auth-login.js";
import { EXIT_NOT_RUNNING, status } from "./status.js";

export const auth: Command = {
  name: "auth",
  help: `Usage: keybroker auth add <provider> [--label NAME] [--flow device|pkce] [--port N]
                                [--no-browser] [--timeout 10m]
       keybroker auth remove <provider> --credential ID
       keybroker auth list [--json]
       keybroker auth reset <provider> [--credential ID] [--port N]
       keybroker auth import codex|claude|gemini|hermes [--file F]
       keybroker auth phantom <provider> --for codex|claude|gemini|hermes [--file F]
                                [--credential ID]

  add      for an OAuth provider, logs in once (device grant, or a code with PKCE and a
           loopback callback at http://127.0.0.1:<port>/callback) and stores the tokens in the
           home's token store as one credential of the provider's pool (--label names it,
           default "default"; the same label again replaces it). The URL is always printed;
           the browser is opened unless --no-browser. --timeout is the longest wait for the
           browser to come back (default 10m). For an API-key provider, says where its key
           is read from (nothing is stored).
  remove   deletes an OAuth login, revoking it where the provider has a revocation endpoint
  list     each provider's credentials and logins and their state (as keybroker status)
  import   takes an agent's own sign-in into the token store (~/.codex/auth.json,
           ~/.claude/.credentials.json, ~/.gemini/oauth_creds.json, ~/.hermes/auth.json, or
           --file) and rewrites that file in place with phantom tokens, which work only
           through keybroker; a file that already holds phantoms is left as it is
  phantom  writes an agent's login file holding phantoms of an existing login (--file for
           another path); for claude without --file, prints CLAUDE_CODE_OAUTH_TOKEN=<phantom>
  reset    clears usage_limit_reached and invalid marks of a provider's credentials (or of
           one, with --credential), in the running broker and on disk; with several
           brokers running for the home, --port N names the one

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(
      argv,
      {
        credential: { type: "string" },
        json: { type: "boolean" },
        label: { type: "string" },
        flow: { type: "string" },
        port: { type: "string" },
        "no-browser": { type: "boolean" },
        timeout: { type: "string" },
        file: { type: "string" },
        for: { type: "string" },
      },
      true,
    );
    const [action, provider, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected arguments: ${extra.join(" ")}`);
    const ctx = createContext(values);
    if (action === "list") {
      const rest = argv.filter((a) => a !== "list");
      // A list is a list whether or not a broker runs: status's "not running" code is not an error.
      const code = await status.run(rest);
      return code === EXIT_NOT_RUNNING ? 0 : code;
    }
    if (action === "import")
      return importAgent(ctx, readRules(ctx, values.config).rules, provider, values.file);
    if (action !== "add" && action !== "reset" && action !== "remove" && action !== "phantom")
      throw new UsageError("expected: keybroker auth add|remove|list|reset|import|phantom ...");
    if (provider === undefined) throw new UsageError(`keybroker auth ${action} needs a provider id`);
    const { rules } = readRules(ctx, values.config);
    const rule = rules.providers.find((p) => p.id === provider);
    if (rule === undefined) {
      throw new UserError(
        `unknown provider "${provider}"; known: ${rules.providers.map((p) => p.id).join(", ")}`,
      );
    }
    if (action === "phantom") {
      if (!isOAuthRule(rule)) throw new UserError(`${provider} has no OAuth logins to make phantoms of`);
      return writePhantom(ctx, rules, provider, {
        agent: values.for,
        file: values.file,
        credential: values.credential,
      });
    }
    if (action === "add") {
      if (isOAuthRule(rule)) {
        return addLogin(ctx, rules, rule, {
          label: values.label,
          flow: values.flow,
          port: values.port,
          noBrowser: values["no-browser"],
          timeout: values.timeout,
        });
      }
      ctx.out(`${provider} uses API keys; keybroker stores nothing for it. It reads, in pool order:`);
      for (const ref of rule.credentials) ctx.out(`  ${ref}`);
      ctx.out(
        `A bare NAME is looked up in: ${[...rules.sources.order.filter((s) => s !== "env"), "env"].join(", ")}.`,
      );
      ctx.out("Set the key there, then run: keybroker check");
      return 0;
    }
    if (action === "remove") {
      if (!isOAuthRule(rule)) {
        throw new UserError(
          `${provider} uses API keys, which keybroker does not store: remove the key where it is set`,
        );
      }
      return removeLogin(ctx, rules, rule, values.credential);
    }
    // An OAuth provider's credentials are its logins.
    if (values.credential !== undefined && kindOf(rule).personLogins) {
      const tokens = await openTokenStore(ctx, rules);
      const ids = await tokens.store
        .list(provider)
        .then((logins) => logins.map((l) => l.id))
        .finally(() => tokens.close());
      if (!ids.includes(values.credential)) {
        throw new UserError(
          `provider "${provider}" has no login "${values.credential}"; its logins: ${ids.length === 0 ? "none" : ids.join(", ")}`,
        );
      }
    }
    if (
      values.credential !== undefined &&
      !kindOf(rule).poolOfLogins &&
      !rule.credentials.includes(values.credential)
    ) {
      throw new UserError(
        `provider "${provider}" has no credential "${values.credential}"; its credentials: ${rule.credentials.join(", ")}`,
      );
    }
    const port = brokerPort(values.port);
    const running = await findRunningBroker(ctx.home, port);
    if (running === undefined && port !== undefined) throw await notOnPortError(ctx.home, port);
    let cleared: string[];
    if (running !== undefined) {
      warnNotBrokersRules(ctx, "auth reset", values.config, running);
      cleared = (
        await adminRequest<{ cleared: string[] }>(ctx.home, running, "POST", "reset", {
          provider,
          ...(values.credential === undefined ? {} : { credential: values.credential }),
        })
      ).cleared;
    } else {
      cleared = await resetHere(ctx, rules, provider, values.credential);
    }
    ctx.out(
      cleared.length === 0 ? `${provider}: no marks to clear` : `${provider}: cleared ${cleared.join(", ")}`,
    );
    return 0;
  },
};

/** Clears marks without a running broker: in the home, and in the fleet's Redis with `state:`. */
async function resetHere(ctx: Context, rules: Rules, provider: string, credential: string | undefined) {
  const pools = new PoolState(ctx.home, (m) => ctx.err(`warning: ${m}`));
  const shared = await openSharedState(rules, sharedStateOptions(ctx, rules));
  try {
    shared.attachPools(pools);
    await shared.settled();
    const cleared = pools.reset(provider, credential);
    await shared.settled();
    return cleared;
  } finally {
    pools.flush();
    await shared.close();
  }
}
