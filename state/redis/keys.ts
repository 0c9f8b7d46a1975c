// How the fleet names things in Redis: the keys, a credential's hash field, and the messages
// brokers publish to each other. Shared by every Redis store.

export interface RedisKeys {
  readonly marks: string;
  /** Reset tombstones (decision 137). */
  readonly resets: string;
  readonly logins: string;
  readonly epoch: string;
  readonly channel: string;
  lock(provider: string, id: string): string;
}

/** The hash field of one credential: JSON keeps any id (a `cmd:` reference) unambiguous. */
export const fieldOf = (provider: string, id: string) => JSON.stringify([provider, id]);
export function parseField(field: string): [string, string] | undefined {
  try {
    const v = JSON.parse(field) as unknown;
    return Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && typeof v[1] === "string"
      ? [v[0], v[1]]
      : undefined;
  } catch {
    return undefined;
  }
}

export interface FleetMessage {
  /**
   * `approval`: `m` is a message of the approval store (approvals/redis.ts); `mark`, `reset`: `m`
   * is a sealed message of marks/sealed.ts.
   */
  readonly t: "mark" | "reset" | "login" | "session" | "approval";
  readonly f?: string;
  readonly m?: string;
  readonly p?: string;
  readonly from: string;
}
