// What names a `run --isolate` launch (docs/decisions.md 114): shared by the broker that mints
// launches (proxy/launches.ts), the admin API and page that show them, and the metrics.

/** What names a launch in the audit log, `status`, metrics and the admin page. */
export interface LaunchInfo {
  readonly id: string;
  /** The client the launch acts as. */
  readonly client: string;
  /** The command line, as `run` was given it (at most 200 characters). */
  readonly command: string;
  readonly startedAt: string;
  /** In lists: the broker listens inside the launch's network namespace itself (decision 139). */
  readonly direct?: boolean;
}

/** The proxy user name a launch authenticates with. */
export const LAUNCH_USER_PREFIX = "launch-";

/** The `run` process that asked for a launch: its pid and start time, as /proc/<pid>/stat gives it. */
export interface LaunchOwner {
  readonly pid: number;
  readonly start: string;
}

/** The launches a broker holds, as the admin API uses them. */
export interface LaunchDesk {
  mint(client: string, command: string, owner?: LaunchOwner): LaunchInfo & { token: string };
  revoke(id: string): LaunchInfo | undefined;
  list(): LaunchInfo[];
  /** Listens inside the network namespace of `pid`, the launch's jail (decision 139). */
  listenInside(id: string, token: string, pid: number): Promise<{ host: string; port: number }>;
}

/** Why the broker will not listen inside a launch (decision 139): the admin API answers 400 with it. */
export class RefusedListener extends Error {}
