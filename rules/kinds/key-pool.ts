// A pool of API keys (docs/spec.md §7): credential references the agent's placeholder stands for,
// picked per request, marked on quota answers.
import { derivedEnvName } from "../provider-defaults.js";
import type { ProviderKind } from "./kind.js";

export const keyPool: ProviderKind = {
  name: "key_pool",
  poolOfLogins: false,
  personLogins: false,
  boundLogins: false,
  signed: false,
  keyFromPlaceholder: true,
  wholeHost: false,
  derivedEnv: derivedEnvName,
  signingRefs: () => [],
  loadRefs: (rule) => rule.credentials,
  active: (resolved) => resolved > 0,
  statusNote: () => undefined,
};
