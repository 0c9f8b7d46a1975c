// Per-launch client identities (docs/decisions.md, decision 114): `keybroker run --isolate`
// asks the broker for one before it starts the agent and gives it back when the agent exits.
// A launch authenticates as `launch-<id>` with its own token and acts as the client it was
// minted for, with the role `user` at most: a launch is never an owner or admin, whatever the
// client is. Launches live in the broker's memory only and survive reloads (the client is
// looked up again in each new rule set). A launch minted for a `run` of this machine is tied to
// that process (decision 136): a sweep every few seconds, off the request path, ends the
// launches whose `run` is gone, killed before it could give the launch back. A launch's `run`
// may ask the broker to listen inside the launch's network namespace itself (decision 139); that
// listener closes when the launch ends.
import { randomBytes } from "node:crypto";
import type { Server, Socket } from "node:net";
import {
  LAUNCH_USER_PREFIX,
  type LaunchDesk,
  type LaunchInfo,
  type LaunchOwner,
  RefusedListener,
} from "../core/launch-info.js";
import { sameToken } from "../core/same-token.js";
import { listenInJail } from "./launch-listener.js";
import { processStart } from "./process-start.js";
import type { ClientState, Runtime } from "./runtime.js";

interface Launch extends LaunchInfo {
  readonly token: string;
  /** The `run` process the launch lives as long as: its pid and start time. */
  readonly owner: LaunchOwner | undefined;
}

/** More launches than this at once is a runaway loop, not a person's agents. */
const MAX_LAUNCHES = 1000;
/** How often the launches of `run` processes that are gone are looked for. */
const SWEEP_MS = 2000;

export { LAUNCH_USER_PREFIX, type LaunchInfo, type LaunchOwner };

/** Where a launch's own listener sends its connections: the broker's port and its server. */
export interface DirectServing {
  readonly port: number;
  accept(socket: Socket): void;
}

export class Launches implements LaunchDesk {
  readonly #byId = new Map<string, Launch>();
  /** The listeners made inside launches' network namespaces, by launch id (decision 139). */
  readonly #listeners = new Map<string, Server>();
  /** Launches whose listener is being made (a second request meanwhile is refused). */
  readonly #making = new Set<string>();
  /** Set once the broker listens: where a launch's own listener's connections go. */
  serving: DirectServing | undefined;
  /** Derived client states, per rule set (a reload builds new ones). */
  #derived = new WeakMap<Runtime, Map<string, ClientState>>();
  #sweep: NodeJS.Timeout | undefined;
  /** Told of each launch the sweep ended (the broker audits it). */
  onGone: ((launch: LaunchInfo) => void) | undefined;

  /**
   * A new launch for `client`: its id and the token only its agent gets. With `owner`, the launch
   * ends when that process is gone, if this broker sees it at all: the pid with the same start
   * time (in another PID namespace the pid may name another process); else it ends when revoked.
   */
  mint(client: string, command: string, owner?: LaunchOwner): LaunchInfo & { token: string } {
    if (this.#byId.size >= MAX_LAUNCHES) throw new Error(`more than ${MAX_LAUNCHES} launches at once`);
    const launch: Launch = {
      id: randomBytes(6).toString("hex"),
      client,
      command: command.length > 200 ? `${command.slice(0, 199)}…` : command,
      startedAt: new Date().toISOString(),
      token: randomBytes(24).toString("base64url"),
      owner: owner !== undefined && processStart(owner.pid) === owner.start ? owner : undefined,
    };
    this.#byId.set(launch.id, launch);
    if (launch.owner !== undefined && this.#sweep === undefined) {
      this.#sweep = setInterval(() => this.#endOrphans(), SWEEP_MS);
      this.#sweep.unref();
    }
    return { ...info(launch), token: launch.token };
  }

  /** Ends the launches whose `run` is gone; stops looking when none is tied to a process. */
  #endOrphans(): void {
    let tied = 0;
    for (const launch of [...this.#byId.values()]) {
      if (launch.owner === undefined) continue;
      if (processStart(launch.owner.pid) === launch.owner.start) tied++;
      else if (this.revoke(launch.id) !== undefined) this.onGone?.(info(launch));
    }
    if (tied === 0) this.#stopSweep();
  }

  #stopSweep(): void {
    clearInterval(this.#sweep);
    this.#sweep = undefined;
  }

  /** Stops the sweep and closes the launches' own listeners (the broker closes). */
  close(): void {
    this.#stopSweep();
    this.serving = undefined;
    for (const server of this.#listeners.values()) server.close();
    this.#listeners.clear();
  }

  /**
   * Listens at the broker's port of 127.0.0.1 inside the network namespace of `pid`, a process
   * of the launch's own `run` (its jail), and serves what comes there as the broker's own
   * connections (decision 139). `token` must be the launch's. Rejects with RefusedListener
   * saying why not: `run` then relays instead.
   */
  async listenInside(id: string, token: string, pid: number): Promise<{ host: string; port: number }> {
    const launch = this.#byId.get(id);
    if (launch === undefined || !sameToken(token, launch.token))
      throw new RefusedListener(`no launch ${id} with that token is running`);
    if (this.#listeners.has(id) || this.#making.has(id))
      throw new RefusedListener(`launch ${id} already has its listener`);
    const serving = this.serving;
    if (serving === undefined) throw new RefusedListener("the broker is not listening");
    this.#making.add(id);
    let server: Server;
    try {
      server = await listenInJail(launch.owner, pid, "127.0.0.1", serving.port);
    } finally {
      this.#making.delete(id);
    }
    // Ended (or the broker closed) while the listener was made: it goes at once.
    if (!this.#byId.has(id) || this.serving !== serving) {
      server.close();
      throw new RefusedListener(`launch ${id} ended`);
    }
    server.on("connection", (socket: Socket) => serving.accept(socket));
    server.on("error", () => server.close());
    this.#listeners.set(id, server);
    return { host: "127.0.0.1", port: serving.port };
  }

  /** Ends a launch: its token stops working at once. Returns it, or undefined if unknown. */
  revoke(id: string): LaunchInfo | undefined {
    const launch = this.#byId.get(id);
    if (launch === undefined) return undefined;
    this.#byId.delete(id);
    // Its namespace lives as long as a socket in it is open: the listener goes with the launch.
    this.#listeners.get(id)?.close();
    this.#listeners.delete(id);
    this.#derived = new WeakMap();
    return info(launch);
  }

  /** The running launches; `direct` when the broker listens inside the launch itself. */
  list(): LaunchInfo[] {
    return [...this.#byId.values()].map((l) => ({
      ...info(l),
      ...(this.#listeners.has(l.id) ? { direct: true } : {}),
    }));
  }

  /**
   * The client state a proxy credential names when its user is `launch-<id>`: undefined when
   * the user is not a launch's; null when it is one but the token, the launch or its client is
   * unknown (refused).
   */
  authenticate(
    rt: Runtime,
    user: string | undefined,
    password: string | undefined,
  ): ClientState | null | undefined {
    if (user === undefined || !user.startsWith(LAUNCH_USER_PREFIX)) return undefined;
    const launch = this.#byId.get(user.slice(LAUNCH_USER_PREFIX.length));
    if (launch === undefined || password === undefined || !sameToken(password, launch.token)) return null;
    return this.state(rt, launch.id) ?? null;
  }

  /** The client state of a launch that still runs (for requests on a connection it opened). */
  state(rt: Runtime, id: string): ClientState | undefined {
    const launch = this.#byId.get(id);
    if (launch === undefined) return undefined;
    let states = this.#derived.get(rt);
    if (states === undefined) {
      states = new Map();
      this.#derived.set(rt, states);
    }
    let state = states.get(launch.id);
    if (state === undefined) {
      const base = rt.clients.get(launch.client);
      if (base === undefined) return undefined;
      const role = base.rule.role === "guest" ? "guest" : "user";
      state = { rule: { ...base.rule, role }, token: base.token, launch: info(launch) };
      states.set(launch.id, state);
    }
    return state;
  }
}

function info(l: Launch): LaunchInfo {
  return { id: l.id, client: l.client, command: l.command, startedAt: l.startedAt };
}
