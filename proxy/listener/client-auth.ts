// Who is asking: the client named by the Proxy-Authorization header (docs/spec.md §5). A CONNECT is
// authenticated once for every request inside its tunnel; a plain-HTTP or reverse-mode request
// is authenticated on its own.
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { isLoopbackHost } from "../../rules/address.js";
import type { Launches } from "../launches.js";
import type { ClientState, Runtime } from "../runtime.js";

const ENV_HINT = "use the proxy URL that `keybroker env --client <name>` prints";

function proxyCredentials(header: string | undefined): { user?: string; password?: string } {
  if (header === undefined || !/^basic /i.test(header)) return {};
  const decoded = Buffer.from(header.slice(6).trim(), "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  try {
    return colon === -1
      ? { user: decodeURIComponent(decoded) }
      : {
          user: decodeURIComponent(decoded.slice(0, colon)),
          password: decodeURIComponent(decoded.slice(colon + 1)),
        };
  } catch {
    throw new BrokerError("bad_request", "the Proxy-Authorization header has an invalid %-escape", {
      hint: ENV_HINT,
    });
  }
}

/** The client a Proxy-Authorization header names; a 407 `client_unauthorized` otherwise. */
export function authenticate(
  rt: Runtime,
  launches: Launches,
  header: string | undefined,
  log: Logger,
): ClientState {
  const { user, password } = proxyCredentials(header);
  const launch = launches.authenticate(rt, user, password);
  if (launch !== undefined && launch !== null) return launch;
  const client = launch === null ? undefined : rt.authenticate(user, password);
  if (client !== undefined) return client;
  const name = user === undefined || user === "" ? "default" : user.slice(0, 64);
  const known = [...rt.clients.keys()].join(", ");
  let message: string;
  let reason: string;
  if (user === undefined || user === "") {
    reason = "no proxy credentials";
    message = "this broker needs a client name and token";
  } else if (rt.clients.has(name)) {
    reason = password === undefined ? "no token" : "wrong token";
    message = `client "${name}" did not authenticate`;
  } else {
    reason = "no such client";
    // Off loopback, a caller that has not authenticated learns no client names.
    const listed = isLoopbackHost(rt.rules.listen.host) ? ` (known: ${known})` : "";
    message = `no such client "${name}"${listed}`;
  }
  // Never the token: only the name it claimed and why it failed.
  log.warn({ client: name, reason, known }, `proxy authentication failed (407): ${reason}`);
  throw new BrokerError("client_unauthorized", message, { hint: ENV_HINT });
}
