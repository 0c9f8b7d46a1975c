import { UserError } from "../../core/errors.js";
import { PoolState } from "../../secrets/pool.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { createContext, findRunningBroker } from "../context.js";
import { readRules } from "../read-rules.js";
import { status } from "./status.js";

export const auth: Command = {
  name: "auth",
  help: `Usage: keybroker auth add <provider>
       keybroker auth list [--json]
       keybroker auth reset <provider> [--credential ID]

  add      for an API-key provider, says where its key is read from (nothing is stored)
  list     each provider's credentials and their state (as keybroker status)
  reset    clears usage_limit_reached and invalid marks of a provider's credentials (or of
           one, with --credential), in the running broker and on disk

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(
      argv,
      { credential: { type: "string" }, json: { type: "boolean" } },
      true,
    );
    const [action, provider, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected arguments: ${extra.join(" ")}`);
    const ctx = createContext(values);
    if (action === "list") {
      const rest = argv.filter((a) => a !== "list");
      return status.run(rest);
    }
    if (action !== "add" && action !== "reset")
      throw new UsageError("expected: keybroker auth add|list|reset ...");
    if (provider === undefined) throw new UsageError(`keybroker auth ${action} needs a provider id`);
    const { rules } = readRules(ctx, values.config);
    const rule = rules.providers.find((p) => p.id === provider);
    if (rule === undefined) {
      throw new UserError(
        `unknown provider "${provider}"; known: ${rules.providers.map((p) => p.id).join(", ")}`,
      );
    }
    if (action === "add") {
      if (rule.oauth !== undefined) {
        throw new UserError(`OAuth logins for "${provider}" are not supported by this version of keybroker`);
      }
      ctx.out(`${provider} uses API keys; keybroker stores nothing for it. It reads, in pool order:`);
      for (const ref of rule.credentials) ctx.out(`  ${ref}`);
      ctx.out(
        `A bare NAME is looked up in: ${[...rules.sources.order.filter((s) => s !== "env"), "env"].join(", ")}.`,
      );
      ctx.out("Set the key there, then run: keybroker check");
      return 0;
    }
    if (values.credential !== undefined && !rule.credentials.includes(values.credential)) {
      throw new UserError(
        `provider "${provider}" has no credential "${values.credential}"; its credentials: ${rule.credentials.join(", ")}`,
      );
    }
    const running = await findRunningBroker(ctx.home);
    let cleared: string[];
    if (running !== undefined) {
      cleared = (
        await adminRequest<{ cleared: string[] }>(ctx.home, running, "POST", "reset", {
          provider,
          ...(values.credential === undefined ? {} : { credential: values.credential }),
        })
      ).cleared;
    } else {
      const pools = new PoolState(ctx.home, (m) => ctx.err(`warning: ${m}`));
      cleared = pools.reset(provider, values.credential);
      pools.flush();
    }
    ctx.out(
      cleared.length === 0 ? `${provider}: no marks to clear` : `${provider}: cleared ${cleared.join(", ")}`,
    );
    return 0;
  },
};
