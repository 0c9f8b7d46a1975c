import { watch } from "node:fs";
import { basename, dirname } from "node:path";
import { brokerRecordOnPort } from "../../core/broker-records.js";
import { UserError } from "../../core/errors.js";
import { relaunchTuned, settleHeap, tuneV8 } from "../../core/v8-tuning.js";
import { Broker } from "../../proxy/server.js";
import { RuleFileError } from "../../rules/errors.js";
import { kindOf } from "../../rules/kinds/index.js";
import { loadRulesIsolated } from "../../rules/load-isolated.js";
import { describeAttempts } from "../../secrets/resolver.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { createContext, readRulesIsolated } from "../context.js";
import { hideSecretsFromEnviron } from "../hide-environ.js";
import { resolvedSecrets } from "../strip-secrets.js";

function alreadyRunning(where: string, pid: number): string {
  return `a keybroker of this home (pid ${pid}) already listens on ${where}: stop it, or pick another --port`;
}

export const start: Command = {
  name: "start",
  help: `Usage: keybroker start [--config FILE] [--port N] [--home DIR]

Runs the broker in the foreground on the rule file's listen address (default 127.0.0.1:8899),
or on the embedded default catalogue when there is no rule file. Prints the address and the CA
path on one line. SIGHUP or a change to the rule file reloads it; an invalid file is rejected
and the old rules stay. SIGINT/SIGTERM (or keybroker stop) stop it, with a last line
"keybroker stopped (SIGTERM)".

  --port N         listen on this port instead (0 picks a free one)

Environment: KEYBROKER_HOME, KEYBROKER_CONFIG, KEYBROKER_LOG_LEVEL (info), KEYBROKER_LOG_FORMAT
(pretty on a terminal, else json), KEYBROKER_ACCESS_LOG=1 (a log line per request), and the variables
that hold your credentials (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...): once read, they show empty in
the broker's /proc/<pid>/environ (better still, keep the keys in the home's .env). KEYBROKER_V8_TUNING=off
keeps V8's defaults instead of the memory-saving settings start applies (node flags, and on
Node 24 MALLOC_ARENA_MAX=1, that it gives itself by restarting in place on Node 22.15 and later; on Node 20 run it as
node --max-semi-space-size=2 --single-threaded-gc --no-node-snapshot "$(command -v keybroker)" start); KEYBROKER_V8_FLAGS
replaces their flag list.

${COMMON_HELP}`,
  async run(argv) {
    relaunchTuned();
    const { values } = parse(argv, { port: { type: "string" } });
    let port: number | undefined;
    if (values.port !== undefined) {
      port = Number(values.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535)
        throw new UsageError(`--port: not a port number: ${values.port}`);
    }
    const ctx = createContext(values);
    const { path, rules } = await readRulesIsolated(ctx, values.config);
    const wanted = port ?? rules.listen.port;
    const where = `${rules.listen.host}:${wanted}`;
    // One broker per port and home: its record would be overwritten, and the CLI could not tell.
    const first = wanted === 0 ? undefined : brokerRecordOnPort(ctx.home, wanted);
    if (first !== undefined) throw new UserError(alreadyRunning(where, first.pid));
    tuneV8();
    // Set below, once `reload` exists; the admin page's "reload" runs it as SIGHUP does.
    let reloadRules: () => Promise<void> = () => Promise.resolve();
    const broker = await Broker.create({
      home: ctx.home,
      rules,
      log: ctx.log,
      port,
      advertise: true,
      reloadRules: () => reloadRules(),
    });
    // Secrets read: nothing left for other processes in /proc/<pid>/environ (decision 119).
    const hide = () => {
      const warning = hideSecretsFromEnviron(broker.runtime.rules, resolvedSecrets(broker.runtime));
      if (warning !== undefined) ctx.log.warn(warning);
    };
    hide();
    try {
      await broker.listen();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EADDRINUSE") {
        const other = brokerRecordOnPort(ctx.home, wanted);
        throw new UserError(
          other !== undefined
            ? alreadyRunning(where, other.pid)
            : `${where} is already in use: is another keybroker running (keybroker status; keybroker stop)? Or pick --port`,
        );
      }
      throw new UserError(`cannot listen on ${where}: ${code ?? (err as Error).message}`);
    }
    settleHeap();
    ctx.out(
      `keybroker listening on ${broker.address.url} · CA ${broker.ca.certPath} · admin page: keybroker admin`,
    );
    // The catalogue's subscription sign-ins nobody has made yet: one line, not a warning each,
    // as the catalogue's key providers without a key say nothing.
    const unused: string[] = [];
    for (const p of broker.runtime.providers.values()) {
      if (kindOf(p.rule).poolOfLogins) {
        // Active with no credential at all: its logins live in the token store (docs/spec.md §8).
        const logins = broker.logins.members(p.rule.id).length;
        if (logins > 0 || !kindOf(p.rule).personLogins)
          ctx.log.info({ provider: p.rule.id, logins }, "provider active (OAuth)");
        else if (p.rule.fromCatalogue) unused.push(p.rule.id);
        else
          ctx.log.warn(
            { provider: p.rule.id },
            `provider has no OAuth login yet: its requests get 401 reauth_required until keybroker auth add ${p.rule.id}`,
          );
      } else if (p.active) {
        const used = p.resolutions.find((r) => r.secret !== undefined)!.secret!;
        ctx.log.info({ provider: p.rule.id, credential: used.id, source: used.source }, "provider active");
      } else if (!p.rule.fromCatalogue) {
        const why = p.resolutions.map((r) => `${r.ref}: ${describeAttempts(r.attempts)}`).join("; ");
        ctx.log.warn(
          { provider: p.rule.id },
          `provider has no credential yet (${why || "no credentials listed"})`,
        );
      }
    }
    if (unused.length > 0) {
      ctx.log.info(
        { providers: unused },
        `subscription sign-ins with no login yet (keybroker auth add <provider> signs in): ${unused.join(", ")}`,
      );
    }
    if (![...broker.runtime.providers.values()].some((p) => p.active)) {
      ctx.log.warn(
        "no provider has a credential: export OPENAI_API_KEY (or another provider's key) and restart, or run keybroker check",
      );
    }

    let reloading = Promise.resolve();
    const reload = (why: string) => {
      reloading = reloading.then(async () => {
        try {
          await broker.reload(await loadRulesIsolated(path));
          hide();
          ctx.log.info({ rules: path ?? "embedded default catalogue", why }, "rules reloaded");
        } catch (err) {
          const message = err instanceof RuleFileError ? err.message : (err as Error).message;
          broker.rejectReload(message);
          ctx.log.error({ why }, `reload rejected, the previous rules stay: ${message}`);
        }
      });
    };
    reloadRules = () => {
      reload("admin page");
      return reloading;
    };
    process.on("SIGHUP", () => reload("SIGHUP"));
    let timer: NodeJS.Timeout | undefined;
    const watcher =
      path === undefined
        ? undefined
        : // Watch the folder: editors replace the file rather than write into it.
          watch(dirname(path), (_event, name) => {
            if (name !== null && name !== basename(path)) return;
            clearTimeout(timer);
            timer = setTimeout(() => reload("rule file changed"), 150);
          });

    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once("SIGINT", resolve);
      process.once("SIGTERM", resolve);
    });
    ctx.log.info({ signal }, "shutting down: closing connections, saving pool marks and the audit log");
    watcher?.close();
    clearTimeout(timer);
    await broker.close();
    ctx.out(`keybroker stopped (${signal})`);
    return 0;
  },
};
