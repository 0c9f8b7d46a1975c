// The authorization code grant with PKCE (RFC 7636, S256) as `auth add` runs it (docs/spec.md §8):
// a loopback listener on the redirect URI's own port (a port in use is an error naming --port),
// the URL always printed (the browser opened unless --no-browser), and the login complete the
// moment a callback with the right state (and iss, RFC 9207) arrives: no wait can end it after
// that. An https redirect URI has the user paste the address they were sent to.
import { once } from "node:events";
import type { Server, ServerResponse } from "node:http";
import { createInterface } from "node:readline";
import * as oauth from "oauth4webapi";
import { UserError } from "../../core/errors.js";
import { http } from "../../core/node-http.js";
import type { OAuthClient, Tokens } from "./oauth-client.js";

export const DEFAULT_CALLBACK_PORT = 8765;
export const DEFAULT_LOGIN_WAIT_MS = 10 * 60_000;

export interface PkceOptions {
  /** `--port`: the loopback port (default 8765), unless redirect_uri names one. */
  readonly port?: number;
  readonly waitMs?: number;
  readonly print: (line: string) => void;
  readonly openBrowser?: (url: string) => void;
  /** Where a pasted address is read from (https redirect URIs). */
  readonly input?: NodeJS.ReadableStream;
}

/** The redirect URI to use: the rule's (with --port as its port), else the loopback default. */
export function redirectUriFor(configured: string | undefined, port: number | undefined): URL {
  const url = new URL(configured ?? `http://127.0.0.1:${DEFAULT_CALLBACK_PORT}/callback`);
  if (url.protocol === "http:" && port !== undefined) url.port = String(port);
  return url;
}

export async function pkceLogin(client: OAuthClient, opts: PkceOptions): Promise<Tokens> {
  const redirect = redirectUriFor(client.spec.redirectUri, opts.port);
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const redirectUri = redirect.toString();
  const authorize = await client.authorizeUrl(
    redirectUri,
    state,
    await oauth.calculatePKCECodeChallenge(verifier),
  );
  const params =
    redirect.protocol === "https:"
      ? await pasted(client, authorize, state, opts)
      : await loopback(client, authorize, redirect, state, opts);
  return client.exchangeCode(params, redirectUri, verifier);
}

async function pasted(
  client: OAuthClient,
  authorize: URL,
  state: string,
  opts: PkceOptions,
): Promise<URLSearchParams> {
  opts.print(`To log in to ${client.provider}, open: ${authorize}`);
  opts.openBrowser?.(authorize.toString());
  opts.print("Then paste here the address your browser was sent to:");
  const rl = createInterface({ input: opts.input ?? process.stdin });
  try {
    for await (const line of rl) {
      const text = line.trim();
      if (text === "") continue;
      let url: URL;
      try {
        url = new URL(text);
      } catch {
        opts.print("That is not an address; paste the whole address from the browser's address bar:");
        continue;
      }
      return callbackParams(client, url, state);
    }
  } finally {
    rl.close();
  }
  throw new UserError("no address was pasted; nothing was stored");
}

async function callbackParams(client: OAuthClient, url: URL, state: string): Promise<URLSearchParams> {
  try {
    return await client.checkCallback(url, state);
  } catch (err) {
    throw new UserError(
      `the login to ${client.provider} failed: ${(err as Error).message}; nothing was stored`,
    );
  }
}

async function loopback(
  client: OAuthClient,
  authorize: URL,
  redirect: URL,
  state: string,
  opts: PkceOptions,
): Promise<URLSearchParams> {
  // A redirect URI without a port names port 80, and that is the port listened on.
  const port = redirect.port === "" ? 80 : Number(redirect.port);
  let settle!: (result: { params?: URLSearchParams; error?: Error }) => void;
  const result = new Promise<{ params?: URLSearchParams; error?: Error }>((resolve) => {
    settle = resolve;
  });
  let done = false;
  /** The first callback of this login to be checked through ends the wait; any later one is 404. */
  const finish = (res: ServerResponse, r: { params?: URLSearchParams; error?: Error }) => {
    if (done) {
      res.writeHead(404).end();
      return;
    }
    done = true;
    res
      .writeHead(r.error === undefined ? 200 : 400, { "content-type": "text/plain" })
      .end(
        r.error === undefined
          ? "Logged in. You can close this tab.\n"
          : "The login failed; see the terminal.\n",
      );
    settle(r);
  };
  const notOurs = (res: ServerResponse) =>
    res
      .writeHead(400, { "content-type": "text/plain" })
      .end("This is not the login keybroker is waiting for.\n");
  const server: Server = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", redirect);
    if (done || url.pathname !== redirect.pathname) {
      res.writeHead(404).end();
      return;
    }
    // Another tab or a stale callback: not ours, keep waiting for the right one.
    if (url.searchParams.get("state") !== state) {
      notOurs(res);
      return;
    }
    client.checkCallback(url, state).then(
      (params) => finish(res, { params }),
      (err: Error) => {
        // Only the server's own answer (right state and iss, RFC 9207) with an error ends the
        // login. A wrong or missing iss is not the server we sent the user to: any local process
        // could send it, and it must not cancel the login (docs/spec.md §8). Say so, keep waiting.
        if (!(err instanceof oauth.AuthorizationResponseError)) {
          opts.print(`A callback was refused (${err.message}); still waiting for the login to come back.`);
          notOurs(res);
          return;
        }
        finish(res, {
          error: new UserError(`the login to ${client.provider} failed: ${err.message}; nothing was stored`),
        });
      },
    );
  });
  server.on("error", () => {});
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve());
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EADDRINUSE") {
      throw new UserError(
        `port ${port} is in use (by another program, or for up to a minute after a connection that used it closed), so the login callback cannot be received — try again in a minute, free it, or pass --port N (the authorization server must accept http://${redirect.hostname}:N${redirect.pathname} as a redirect URI)`,
      );
    }
    if ((err as NodeJS.ErrnoException).code === "EACCES") {
      throw new UserError(
        `port ${port} needs privileges to listen on, so the login callback cannot be received — name a port above 1023 in oauth.redirect_uri, or pass --port N (the authorization server must accept http://${redirect.hostname}:N${redirect.pathname} as a redirect URI)`,
      );
    }
    throw err;
  }
  opts.print(`To log in to ${client.provider}, open: ${authorize}`);
  opts.print(`Waiting for the browser to come back to ${redirect.origin}${redirect.pathname} ...`);
  opts.openBrowser?.(authorize.toString());
  const waitMs = opts.waitMs ?? DEFAULT_LOGIN_WAIT_MS;
  // The wait ends only a login that has not come back: once the callback arrived, done is set
  // and the timer's answer is ignored.
  const timer = setTimeout(() => {
    if (!done) {
      done = true;
      settle({
        error: new UserError(
          `no login came back within ${Math.round(waitMs / 1000)} s; nothing was stored — run keybroker auth add ${client.provider} again`,
        ),
      });
    }
  }, waitMs);
  try {
    const r = await result;
    if (r.error !== undefined) throw r.error;
    return r.params!;
  } finally {
    clearTimeout(timer);
    server.close();
    server.closeAllConnections();
    await once(server, "close").catch(() => {});
  }
}
