// What the admin API and page need from the running broker: a small interface the Broker
// implements, so admin/ depends on the broker's parts and not on the Broker class (no import
// circle with proxy/server.ts).
import type { AuditEntry, AuditHealth } from "../audit/audit-log.js";
import type { Approvals } from "../proxy/approvals.js";
import type { Launches } from "../proxy/launches.js";
import type { Runtime } from "../proxy/runtime.js";
import type { SharedState } from "../secrets/fleet/shared-state.js";
import type { OAuthLogins } from "../secrets/oauth/logins.js";
import type { OAuthClient } from "../secrets/oauth/oauth-client.js";
import type { PoolState } from "../secrets/pool.js";

export interface AdminHost {
  readonly home: string;
  /** The listener's address (`url` is what `status` prints). */
  readonly address: { readonly host: string; readonly port: number; readonly url: string };
  readonly startedAt: Date;
  readonly ca: { readonly certPath: string; readonly fingerprint256: string };
  readonly runtime: Runtime;
  readonly pools: PoolState;
  readonly logins: OAuthLogins;
  /** Requests held by `approve` rules: list, approve, deny, and a change event for live views. */
  readonly approvals: Approvals;
  /** `run --isolate` launches and their client identities (decision 114). */
  readonly launches: Launches;
  /** Where marks and logins are shared (the home, or a fleet's Redis), for `status`. */
  readonly sharedState: Pick<SharedState, "health" | "mcp">;
  /** When the last reload was rejected, and why. */
  readonly reloadRejected: { readonly at: Date; readonly message: string } | undefined;
  auditHealth(): AuditHealth[];
  /** Records one audit line (both chains where the decision is a security one). */
  audit(entry: AuditEntry): void;
  /** Logs and audits a pool reset done through the admin API or page. */
  onReset(provider: string, cleared: readonly string[]): void;
  /** The OAuth client of a provider with `oauth:`, on the broker's upstream agent. */
  oauthClient(provider: string): OAuthClient | undefined;
  /**
   * The client one login is refreshed and revoked with: the provider's, or for an MCP server the
   * client and authorization server the login was made with (its binding).
   */
  loginClient(provider: string, id: string): Promise<OAuthClient | undefined>;
  /** Reloads the rule file as SIGHUP does; resolves once done (or rejected, see reloadRejected). */
  reloadRules(): Promise<void>;
}
