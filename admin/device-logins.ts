// Device-flow OAuth logins started from the admin page (docs/spec.md §16 actions): the page shows where
// to go and the code; the broker waits for the approval in the background and stores the login
// in the token store, which the running broker follows.
import { deviceLogin } from "../secrets/oauth/device-login.js";
import { checkLabel, newLogin } from "../state/tokens/login.js";
import type { AdminHost } from "./host.js";

export interface DeviceLoginState {
  readonly provider: string;
  readonly label: string;
  readonly startedAt: number;
  url?: string;
  code?: string;
  expiresAt?: number;
  status: "starting" | "waiting" | "done" | "failed";
  message?: string;
}

const KEEP = 8;

export class DeviceLogins {
  readonly #list: DeviceLoginState[] = [];
  readonly #aborts = new Map<DeviceLoginState, AbortController>();

  /** Newest first. */
  get list(): readonly DeviceLoginState[] {
    return this.#list;
  }

  /** Starts a login; resolves once the code is known (or the start failed). */
  start(host: AdminHost, provider: string, label: string): Promise<DeviceLoginState> {
    const client = host.oauthClient(provider);
    if (client === undefined) throw new Error(`${provider} has no oauth: section`);
    const id = checkLabel(label);
    const state: DeviceLoginState = { provider, label: id, startedAt: Date.now(), status: "starting" };
    this.#list.unshift(state);
    for (const old of this.#list.splice(KEEP)) this.#aborts.get(old)?.abort();
    const abort = new AbortController();
    this.#aborts.set(state, abort);
    return new Promise((resolve) => {
      deviceLogin(
        client,
        () => {},
        (start) => {
          state.url = start.verificationUriComplete ?? start.verificationUri;
          state.code = start.userCode;
          state.expiresAt = Date.now() + start.expiresIn * 1000;
          state.status = "waiting";
          resolve(state);
        },
        abort.signal,
      )
        .then(async (tokens) => {
          await host.logins.store.put(newLogin(provider, id, tokens));
          state.status = "done";
          state.message = `logged in as credential "${id}"`;
        })
        .catch((err: Error) => {
          state.status = "failed";
          state.message = abort.signal.aborted ? "cancelled" : err.message;
        })
        .finally(() => {
          this.#aborts.delete(state);
          resolve(state);
        });
    });
  }

  close(): void {
    for (const a of this.#aborts.values()) a.abort();
  }
}
