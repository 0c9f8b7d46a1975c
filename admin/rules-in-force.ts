// The rules a running broker has in force, as admin/ reads them: a structural view that
// proxy/runtime.ts's `Runtime` satisfies, so admin/ (the admin API, the page, `status`, what an
// agent is given) does not import proxy/, which imports admin/ (docs/architecture.md).
import type { ClientRule, ProviderRule, Rules } from "../rules/types.js";
import type { Resolution } from "../secrets/resolver.js";
import type { Secret } from "../secrets/secret.js";

export interface ProviderInForce {
  readonly rule: ProviderRule;
  /** Its credentials' resolutions, in pool order. */
  readonly resolutions: readonly Resolution[];
  /** The broker intercepts its hosts (an agent is given its placeholder). */
  readonly intercepted: boolean;
  readonly active: boolean;
}

export interface ClientInForce {
  readonly rule: ClientRule;
  readonly token: Secret | undefined;
}

export interface RulesInForce {
  readonly rules: Rules;
  readonly providers: ReadonlyMap<string, ProviderInForce>;
  readonly clients: ReadonlyMap<string, ClientInForce>;
  readonly placeholders: { get(client: string, provider: string): string | undefined };
  /** Whether the client may use the provider (its `providers:` list). */
  clientAllows(client: ClientInForce, provider: string): boolean;
}
