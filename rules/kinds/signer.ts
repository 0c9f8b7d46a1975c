// What the two signing kinds share (docs/spec.md §9): the broker authorizes each request itself, last,
// from credential parts named in `auth:`; no login, no placeholder variable of their own, active
// once every part resolves. They differ only in their name and those parts.
import { derivedEnvName } from "../provider-defaults.js";
import type { ProviderRule } from "../types.js";
import type { ProviderKind, ProviderKindName } from "./kind.js";

export function signerKind(
  name: ProviderKindName,
  parts: (rule: ProviderRule) => readonly string[],
): ProviderKind {
  return {
    name,
    poolOfLogins: false,
    personLogins: false,
    boundLogins: false,
    signed: true,
    keyFromPlaceholder: false,
    wholeHost: false,
    derivedEnv: derivedEnvName,
    signingRefs: parts,
    loadRefs: parts,
    active: (resolved, total) => resolved === total,
    statusNote: () => undefined,
  };
}
