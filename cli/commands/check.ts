import { homeKey } from "../../core/home.js";
import { Runtime } from "../../proxy/runtime.js";
import { createSecretResolver } from "../../secrets/sources.js";
import { COMMON_HELP, parse } from "../args.js";
import type { Command } from "../command.js";
import { createContext, readRules } from "../context.js";

export const check: Command = {
  name: "check",
  summary: "validate the rule file and resolve every credential (values never printed)",
  help: `Usage: keybroker check [--config FILE] [--home DIR]

Validates the rule file (every problem at once, each with its path and a fix), then resolves
every provider's credentials and reports which source answered and why others did not
(missing, empty, error). Values are never printed, only a fingerprint. Exits 1 when the rule
file is invalid, when a provider the rule file names has no credential, or when no provider
has one at all.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {});
    const ctx = createContext(values);
    const { rules } = readRules(ctx, values.config);
    ctx.out(`rules: ${rules.origin} (valid)`);
    const warnings: string[] = [];
    const resolver = createSecretResolver(rules, {
      env: ctx.env,
      home: ctx.home,
      cwd: ctx.cwd,
      warn: (m) => warnings.push(m),
    });
    const rt = await Runtime.build(rules, resolver, homeKey(ctx.home));
    const problems: string[] = [];
    let active = 0;
    for (const p of rt.providers.values()) {
      const id = p.rule.id;
      if (p.active) active++;
      if (!p.active && p.rule.fromCatalogue) continue;
      ctx.out(`${id}: ${p.active ? "active" : "NO CREDENTIAL"}`);
      if (p.rule.credentials.length === 0) {
        const why = id.endsWith("-oauth")
          ? "authenticates only with OAuth logins (keybroker auth add)"
          : "no credentials listed";
        ctx.out(`  (${why})`);
      }
      for (const r of p.resolutions) {
        if (r.secret !== undefined) {
          const skipped = r.attempts
            .filter((a) => a.outcome !== "found")
            .map((a) => `${a.source}: ${a.outcome}`);
          ctx.out(
            `  ${r.ref}: from ${r.secret.source} (${r.secret.fingerprint})${skipped.length ? `; before it ${skipped.join(", ")}` : ""}`,
          );
        } else {
          ctx.out(
            `  ${r.ref}: not found (${r.attempts.map((a) => (a.message ? `${a.source}: ${a.message}` : `${a.source}: ${a.outcome}`)).join(", ")})`,
          );
        }
      }
      if (!p.active) {
        problems.push(
          `provider "${id}" has no credential: set ${p.rule.credentials[0] ?? `providers.${id}.credentials`} (in the environment or .env)`,
        );
      }
    }
    const inactive = [...rt.providers.values()]
      .filter((p) => !p.active && p.rule.fromCatalogue)
      .map((p) => p.rule.id);
    if (inactive.length > 0) ctx.out(`catalogue providers without a key (inactive): ${inactive.join(", ")}`);
    if (active === 0 && problems.length === 0) {
      problems.push(
        "no provider has a credential: export OPENAI_API_KEY (or another provider's key) or add a rule file",
      );
    }
    for (const w of warnings) ctx.err(`warning: ${w}`);
    for (const p of problems) ctx.err(`problem: ${p}`);
    return problems.length > 0 ? 1 : 0;
  },
};
