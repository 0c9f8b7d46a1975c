// What the fleet tests share besides the Redis server (redis.ts): a fleet state opened in the
// test process, and a wait for a condition with a deadline.
import { RedisState } from "../../state/redis/state.js";

/** Resolves with the first value `check` gives that is neither undefined nor false. */
export async function until<T>(
  check: () => Promise<T | undefined | false>,
  what: string,
  ms = 10_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A fleet state in the test process, as a broker of the fleet opens it (a password, a prefix). */
export function openFleetState(
  url: string,
  password: string,
  prefix: string,
  home: string,
  key: () => Buffer,
): Promise<RedisState> {
  return RedisState.open(
    { url, password: "env:P", prefix },
    { home, homeKey: key, resolve: async () => password, log: { warn: () => {}, info: () => {} } },
  );
}
