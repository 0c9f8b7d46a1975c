// The device authorization grant (RFC 8628) as `auth add` runs it: print where to go and the
// code, poll at the server's interval (5 s more on slow_down), keep waiting on
// authorization_pending, stop with a clear message on access_denied or expired_token.
import { setTimeout as sleep } from "node:timers/promises";
import { UserError } from "../../core/errors.js";
import { type DeviceStart, type OAuthClient, OAuthServerError, type Tokens } from "./oauth-client.js";
import { isLinkableUrl, printable } from "./verification-url.js";

/**
 * The poll interval is the server's, floored at 1 s and capped at an hour: a hostile server must
 * not make keybroker poll in a tight loop, neither with a tiny interval nor with one too long
 * for a timer (decision 100).
 */
export const MIN_POLL_INTERVAL_S = 1;
export const MAX_POLL_INTERVAL_S = 3600;

export async function deviceLogin(
  client: OAuthClient,
  print: (line: string) => void,
  /** Told where to go and the code (the admin page shows them); `signal` stops the waiting. */
  onStart?: (start: DeviceStart) => void,
  signal?: AbortSignal,
): Promise<Tokens> {
  const start = await client.startDevice(signal);
  onStart?.(start);
  const where = start.verificationUriComplete ?? start.verificationUri;
  print(`To log in to ${client.provider}, open: ${printable(where)}`);
  if (start.verificationUriComplete !== undefined) print(`(or open ${printable(start.verificationUri)})`);
  if (!isLinkableUrl(where)) {
    print("(the authorization server gave an address that is not https: check it before you open it)");
  }
  print(`and enter the code: ${printable(start.userCode)}`);
  print("Waiting for the login to be approved...");
  let interval = Math.max(MIN_POLL_INTERVAL_S, start.interval);
  const deadline = Date.now() + start.expiresIn * 1000;
  for (;;) {
    // Never past the code's expiry by more than the floor: one last poll, then the message.
    const left = Math.max(MIN_POLL_INTERVAL_S, (deadline - Date.now()) / 1000);
    await sleep(Math.min(interval, MAX_POLL_INTERVAL_S, left) * 1000, undefined, { signal });
    try {
      return await client.pollDevice(start, signal);
    } catch (err) {
      if (!(err instanceof OAuthServerError)) throw err;
      switch (err.error) {
        case "authorization_pending":
          break;
        case "slow_down":
          interval += 5;
          break;
        case "access_denied":
          throw new UserError(
            `the login to ${client.provider} was denied at the authorization server; nothing was stored`,
          );
        case "expired_token":
          throw new UserError(
            `the code expired before the login to ${client.provider} was approved; nothing was stored — run keybroker auth add ${client.provider} again`,
          );
        default:
          throw err;
      }
    }
    if (Date.now() > deadline) {
      throw new UserError(
        `the code expired before the login to ${client.provider} was approved; nothing was stored — run keybroker auth add ${client.provider} again`,
      );
    }
  }
}
