// Commands the broker tells a person to run, spelled as they would type them.
import { homePath } from "./home.js";

/** A path as one shell word. */
export function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`;
}

/** `keybroker approve <id>`, with --home when the broker's home is not the default one. */
export function approveCommand(home: string, id: string, verb: "approve" | "deny" = "approve"): string {
  const flag = home === homePath(undefined, {}) ? "" : ` --home ${shellQuote(home)}`;
  return `keybroker ${verb} ${id}${flag}`;
}

/** `keybroker auth add <provider>`, with --label for a login other than the default one. */
export function authAddCommand(provider: string, id: string | undefined): string {
  return `keybroker auth add ${provider}${id === undefined || id === "default" ? "" : ` --label ${id}`}`;
}
