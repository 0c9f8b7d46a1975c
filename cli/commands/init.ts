import { existsSync } from "node:fs";
import { join } from "node:path";
import { writeTrustBundle } from "../../certs/bundle.js";
import { loadOrCreateCa } from "../../certs/ca.js";
import { ensurePrivateDir, writeFileAtomic } from "../../core/fs.js";
import { homeKey } from "../../core/home.js";
import { COMMON_HELP, parse } from "../args.js";
import type { Command } from "../command.js";
import { refuseConfig } from "../config-flag.js";
import { createContext } from "../context.js";

export const STARTER_RULES = `# keybroker rule file (see the README, "Rule file").
# Without any providers: entry the embedded catalogue serves (openai, anthropic, gemini, ...):
# each is active when its usual variable (OPENAI_API_KEY, ...) has a value.
# Keep the real keys in the home's .env (~/.keybroker/.env, KEY=value lines, mode 0600), not in a
# project's ./.env or your shell's exports: agents read the folders they work in, and
# keybroker run --isolate hides the home from them (keybroker check --exposure lists the rest).
version: 1
listen: 127.0.0.1:8899
intercept: providers

providers:
  # openai:
  #   credentials: [OPENAI_API_KEY, OPENAI_API_KEY_2]   # a pool; bare name = .env (./.env, then the home's), then the environment
  # my-api:
  #   hosts: [api.example.com]
  #   inject: { header: authorization, format: "Bearer {secret}" }
  #   credentials: ["file:~/.keybroker/secrets/my-api"]

clients:
  default: { providers: "*" }
`;

export const init: Command = {
  name: "init",
  help: `Usage: keybroker init [--home DIR]

Creates the home (0700), the local CA (key 0600), the home's placeholder key, a trust bundle,
and $KEYBROKER_HOME/keybroker.yaml unless one exists. Prints the next steps.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {});
    refuseConfig(
      values.config,
      "init",
      "it writes its starter rule file to the home (<home>/keybroker.yaml, which the other commands find); copy it elsewhere and name that with --config",
    );
    const ctx = createContext(values);
    ensurePrivateDir(ctx.home);
    const authority = loadOrCreateCa(ctx.home);
    homeKey(ctx.home);
    const bundle = writeTrustBundle(authority, ctx.home);
    const rulesPath = join(ctx.home, "keybroker.yaml");
    const created = !existsSync(rulesPath);
    if (created) writeFileAtomic(rulesPath, STARTER_RULES, 0o600);
    ctx.out(`home:       ${ctx.home}`);
    ctx.out(`CA:         ${authority.certPath} (${authority.fingerprint256})`);
    ctx.out(`CA bundle:  ${bundle}`);
    ctx.out(`rule file:  ${rulesPath}${created ? " (created)" : " (kept)"}`);
    ctx.out("");
    // A home given with --home must be given to the next commands too.
    const home = values.home === undefined ? "" : ` --home ${values.home}`;
    ctx.out("Next:");
    ctx.out(`  1. put your real keys in ${join(ctx.home, ".env")} (KEY=value lines, mode 0600), not in a`);
    ctx.out(`     project's ./.env or your shell's exports, then: keybroker check${home}`);
    ctx.out(`  2. keybroker start${home}                 # runs the broker on 127.0.0.1:8899`);
    ctx.out(`  3. keybroker run${home} -- <your agent>   # the agent gets placeholders, never the keys`);
    ctx.out(`     or in the agent's shell: eval "$(keybroker env${home})"`);
    ctx.out(`     on Linux, keybroker run --isolate also hides the home and the broker from the agent`);
    return 0;
  },
};
