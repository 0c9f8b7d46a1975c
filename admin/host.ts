// What the admin API and page need from the running broker: a small interface the Broker
// implements, so admin/ depends on the broker's parts and not on the Broker class (no import
// cycle with proxy/server.ts: the interfaces here are what proxy/ implements).
import type { AuditEntry, AuditHealth } from "../audit/audit-log.js";
import type { LaunchDesk } from "../core/launch-info.js";
import type { OAuthLogins } from "../secrets/oauth/logins.js";
import type { OAuthClient } from "../secrets/oauth/oauth-client.js";
import type { PoolState } from "../secrets/pool.js";
import type { ApprovalView } from "../state/approvals/store.js";
import type { SharedState } from "../state/shared-state.js";
import type { RulesInForce } from "./rules-in-force.js";

/** Requests held for approval, as admin/ answers them (proxy/approvals.ts `Approvals` is one). */
export interface ApprovalDesk {
  /** Every pending request, oldest first. */
  list(): Promise<ApprovalView[]>;
  /** Lets one through (with `forMs`, the same client, provider and rule for a while). */
  approve(id: string, by: string, forMs?: number): Promise<ApprovalView | undefined>;
  deny(id: string, by: string): Promise<ApprovalView | undefined>;
}

export interface AdminHost {
  readonly home: string;
  /** The listener's address (`url` is what `status` prints). */
  readonly address: { readonly host: string; readonly port: number; readonly url: string };
  readonly startedAt: Date;
  readonly ca: { readonly certPath: string; readonly fingerprint256: string };
  readonly runtime: RulesInForce;
  readonly pools: PoolState;
  readonly logins: OAuthLogins;
  /** Requests held by `approve` rules: list, approve, deny, and a change event for live views. */
  readonly approvals: ApprovalDesk;
  /** `run --isolate` launches and their client identities (decision 114). */
  readonly launches: LaunchDesk;
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
