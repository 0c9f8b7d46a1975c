// `keybroker admin [--open]`: a one-time login link to the running broker's admin page;
// `keybroker admin password`: sets the page's password (docs/spec.md §16).
import { passwordPath, setPassword } from "../../admin/password.js";
import { UserError } from "../../core/errors.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { refuseConfig, warnNotBrokersRules } from "../config-flag.js";
import { brokerPort, createContext, findRunningBroker } from "../context.js";
import { notOnPortError } from "../port-probe.js";
import { openBrowser } from "./auth-login.js";

const MIN_LENGTH = 10;

/** Reads one line without echo from the terminal. */
function readHidden(prompt: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(prompt);
  return new Promise((resolve, reject) => {
    let text = "";
    stdin.setRawMode(true);
    stdin.resume();
    const done = (err?: Error) => {
      stdin.setRawMode(false);
      stdin.pause();
      stdin.off("data", onData);
      process.stderr.write("\n");
      if (err) reject(err);
      else resolve(text);
    };
    const onData = (chunk: Buffer) => {
      for (const ch of chunk.toString("utf8")) {
        if (ch === "\r" || ch === "\n") return done();
        if (ch === "\u0003") return done(new UserError("cancelled; the password was not changed"));
        if (ch === "\u007f" || ch === "\b") text = text.slice(0, -1);
        else if (ch >= " ") text += ch;
      }
    };
    stdin.on("data", onData);
  });
}

async function readStdinLine(): Promise<string> {
  let text = "";
  for await (const chunk of process.stdin) {
    text += String(chunk);
    if (text.length > 4096) throw new UserError("the password on stdin is longer than 4096 characters");
  }
  return text.split(/\r?\n/)[0] ?? "";
}

export const admin: Command = {
  name: "admin",
  help: `Usage: keybroker admin [--open] [--port N]
       keybroker admin password

  admin            prints a one-time link that logs a browser on this machine in to the running
                   broker's admin page (/admin/ on its listener); it works once, within 10 minutes
    --open         also opens it in the browser
    --port N       with several brokers running for the home, the one on this port
  admin password   sets the admin page's password (at least ${MIN_LENGTH} characters): typed twice
                   on a terminal, or the first line of stdin when stdin is not a terminal. Stored
                   as a scrypt hash in $KEYBROKER_HOME/admin.password (0600); a running broker
                   uses it at the next login. Off loopback the page is served over TLS, with a
                   leaf from the local CA (keybroker ca path).

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(
      argv,
      { open: { type: "boolean" }, port: { type: "string" } },
      true,
    );
    const [action, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected arguments: ${extra.join(" ")}`);
    const ctx = createContext(values);
    if (action === "password") {
      refuseConfig(values.config, "admin password", "the password is the home's, whatever the rules");
      const tty = process.stdin.isTTY === true;
      let password: string;
      if (tty) {
        password = await readHidden("New admin page password: ");
        if (password.length >= MIN_LENGTH && (await readHidden("Again: ")) !== password)
          throw new UserError("the two passwords differ; nothing was changed");
      } else {
        password = await readStdinLine();
      }
      if (password.length < MIN_LENGTH) {
        throw new UserError(
          `the password must have at least ${MIN_LENGTH} characters (got ${password.length}); nothing was changed`,
        );
      }
      await setPassword(ctx.home, password);
      ctx.out(`admin page password set (scrypt hash in ${passwordPath(ctx.home)}, mode 0600)`);
      return 0;
    }
    if (action !== undefined) throw new UsageError(`unknown admin action "${action}" (expected: password)`);
    const port = brokerPort(values.port);
    const running = await findRunningBroker(ctx.home, port);
    if (running === undefined) {
      if (port !== undefined) throw await notOnPortError(ctx.home, port);
      throw new UserError("no keybroker runs for this home: start one with keybroker start");
    }
    warnNotBrokersRules(ctx, "admin", values.config, running);
    const { url } = await adminRequest<{ url: string }>(ctx.home, running, "POST", "login-link");
    ctx.out("Open this link in a browser on this machine (it works once, within 10 minutes):");
    ctx.out(url);
    if (values.open) openBrowser(url);
    return 0;
  },
};
