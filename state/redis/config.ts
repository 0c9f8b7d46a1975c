// A fleet's Redis as the rule file's `state:` names it (docs/spec.md §17), in the shape this folder
// needs: rules/types.ts's `RedisStateConfig` is one (state/ reads no rule file itself).
export interface RedisConfig {
  readonly url: string;
  /** A credential reference, resolved by the caller (SharedStateOptions.resolve). */
  readonly password?: string;
  readonly prefix: string;
  /** rediss:// only: the rule file's `upstream_ca` files, trusted besides the system's roots. */
  readonly ca?: readonly string[];
}
