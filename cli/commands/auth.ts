import { UserError } from "../../core/errors.js";
import { PoolState } from "../../secrets/pool.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { brokerPort, createContext, findRunningBroker } from "../context.js";
import { readRules } from "../read-rules.js";
import { EXIT_NOT_RUNNING, status } from "./status.js";

export const auth: Command = {
  name: "auth",
  help: `Usage: keybroker auth add <provider>
       keybroker auth list [--json]
       keybroker auth reset <provider> [--credential ID] [--port N]

  add      for an API-key provider, says where its key is read from (nothing is stored)
  list     each provider's credentials and their state (as keybroker status)
  reset    clears usage_limit_reached and invalid marks of a provider's credentials (or of
           one, with --credential), in the running broker and on disk; with several
           brokers running for the home, --port N names the one

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(
      argv,
      { credential: { type: "string" }, json: { type: "boolean" }, port: { type: "string" } },
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
    const port = brokerPort(values.port);
    const running = await findRunningBroker(ctx.home, port);
    if (running === undefined && port !== undefined)
      throw new UserError(`no keybroker of this home runs on port ${port}`);
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
