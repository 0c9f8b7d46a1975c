// `notify: "cmd:<argv>"` (docs/spec.md §16): a command run once per event that needs a person (an
// approval pending, a login that needs `auth add` again), with the event as one JSON object on
// stdin. Users point it at a chat: a webhook call, a messaging CLI.
//
// It never stops anything: the command runs without a shell in its own process group, is killed
// after a timeout, and its failure is logged. At most a few run at once; a burst beyond the queue
// is dropped with one warning, so a slow chat cannot pile up processes. What the command prints
// is ignored. The events hold ids, never a secret: callers build them from names only.
import { spawn } from "node:child_process";
import { childEnvironment } from "./initial-environ.js";

export interface NotifyEvent {
  /** `approval_pending`, `reauth_required`, ... */
  readonly event: string;
  readonly [key: string]: unknown;
}

export interface NotifierOptions {
  readonly warn: (message: string) => void;
  readonly env?: NodeJS.ProcessEnv;
  /** The command is killed after this long (default 10 s). */
  readonly timeoutMs?: number;
  /** Commands running at once (default 4). */
  readonly concurrency?: number;
  /** Events waiting beyond those (default 64); more are dropped. */
  readonly queue?: number;
}

interface Pending {
  readonly argv: readonly string[];
  readonly line: string;
  readonly done: () => void;
}

export class Notifier {
  #argv: readonly string[] | undefined;
  readonly #opts: NotifierOptions;
  readonly #waiting: Pending[] = [];
  #running = 0;
  #dropping = false;

  constructor(argv: readonly string[] | undefined, opts: NotifierOptions) {
    this.#argv = argv;
    this.#opts = opts;
  }

  /** The command from the rule file; a reload sets it anew (undefined: notify nobody). */
  setCommand(argv: readonly string[] | undefined): void {
    this.#argv = argv;
  }

  get configured(): boolean {
    return this.#argv !== undefined && this.#argv.length > 0;
  }

  /**
   * Sends `event` to the command. Resolves when the command has ended, was dropped or there is
   * none; never rejects, so callers need not wait for it.
   */
  notify(event: NotifyEvent): Promise<void> {
    const argv = this.#argv;
    if (argv === undefined || argv.length === 0) return Promise.resolve();
    const line = `${JSON.stringify({ ...event, at: new Date().toISOString() })}\n`;
    return new Promise((resolve) => {
      const limit = this.#opts.concurrency ?? 4;
      if (this.#running < limit) {
        this.#start({ argv, line, done: resolve });
        return;
      }
      if (this.#waiting.length >= (this.#opts.queue ?? 64)) {
        if (!this.#dropping) {
          this.#dropping = true;
          this.#opts.warn(
            `notify: ${this.#waiting.length} events already wait for the command; dropping "${event.event}" and later ones until it catches up`,
          );
        }
        resolve();
        return;
      }
      this.#waiting.push({ argv, line, done: resolve });
    });
  }

  #start(job: Pending): void {
    this.#running++;
    const [file, ...args] = job.argv as [string, ...string[]];
    const timeoutMs = this.#opts.timeoutMs ?? 10_000;
    let settled = false;
    const finish = (problem?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (problem !== undefined) this.#opts.warn(`notify: the command (${file}) ${problem}`);
      this.#running--;
      job.done();
      const next = this.#waiting.shift();
      if (next !== undefined) this.#start(next);
      else this.#dropping = false;
    };
    const child = spawn(file, args, {
      env: childEnvironment(this.#opts.env ?? process.env),
      stdio: ["pipe", "ignore", "ignore"],
      shell: false,
      detached: true,
      windowsHide: true,
    });
    const timer = setTimeout(() => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
      finish(`did not finish within ${timeoutMs / 1000} s and was stopped`);
    }, timeoutMs);
    timer.unref();
    child.on("error", (err) => finish(`could not be started: ${err.message}`));
    child.on("close", (code, signal) => {
      if (code === 0) finish();
      else finish(code === null ? `was killed by ${signal ?? "a signal"}` : `exited with status ${code}`);
    });
    // A command that does not read stdin closes the pipe early: that is its business.
    child.stdin.on("error", () => {});
    child.stdin.end(job.line);
  }
}
