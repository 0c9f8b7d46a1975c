// A remote MCP server (docs/spec.md §15): keybroker discovers its authorization server, logs in with a
// code and PKCE as a client registered (or configured) for it, and owns its challenges.
import { derivedTokenEnvName } from "../provider-defaults.js";
import type { ProviderKind } from "./kind.js";

export const mcp: ProviderKind = {
  name: "mcp",
  poolOfLogins: true,
  personLogins: true,
  boundLogins: true,
  signed: false,
  keyFromPlaceholder: false,
  wholeHost: true,
  derivedEnv: derivedTokenEnvName,
  signingRefs: () => [],
  loadRefs: (rule) => rule.credentials,
  active: () => true,
  statusNote: (rule) =>
    `MCP server ${rule.kind === "mcp" ? rule.mcp.url : "?"}: keybroker logs in to it (keybroker auth add ${rule.id})`,
};
