// How a section of the rule file becomes its compiled form, as types derived from the schema
// (rules/schema/) and the one runtime step they share: a key keeps its parsed type and is only
// camel-cased, unless it is a duration (compiled to milliseconds, `…Ms`). A key added to a
// section's schema thereby reaches its compiled type; test/unit/rules/schema-coverage.test.ts
// checks that it reaches the compiled value too.
import { parseDuration } from "./units.js";

/** `device_authorization_endpoint` → `deviceAuthorizationEndpoint`. */
export type CamelCase<S extends string> = S extends `${infer Head}_${infer Tail}`
  ? `${Head}${Capitalize<CamelCase<Tail>>}`
  : S;

/** The keys `K` of a parsed section as written, camel-cased, each with its parsed type. */
export type AsWritten<T, K extends keyof T & string = keyof T & string> = {
  readonly [P in K as CamelCase<P>]-?: Readonly<NonNullable<T[P]>>;
};

/** The keys `K` of a parsed section that take one value or a list, camel-cased, always a list. */
export type Listed<T, K extends keyof T & string = keyof T & string> = {
  readonly [P in K as CamelCase<P>]-?: readonly ItemOf<NonNullable<T[P]>>[];
};

/** `E` of a key written as `E | E[]`. */
type ItemOf<V> = V extends readonly (infer E)[] ? E : V;

/** The duration keys `K` of a parsed section in milliseconds: `tunnel_idle` → `tunnelIdleMs`. */
export type InMs<T, K extends keyof T & string = keyof T & string> = {
  readonly [P in K as `${CamelCase<P>}Ms`]: number;
};

export function camelCase(key: string): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

/**
 * Each duration given in a section whose keys are all durations, in milliseconds under its
 * `…Ms` name; a key not given is left out (its default applies).
 */
export function durationsInMs<T extends Readonly<Record<string, string | number | undefined>>>(
  section: T | null | undefined,
): Partial<InMs<T>> {
  const given = Object.entries(section ?? {}).flatMap(([key, value]) => {
    const ms = value === undefined ? undefined : parseDuration(value);
    return ms === undefined ? [] : [[`${camelCase(key)}Ms`, ms]];
  });
  return Object.fromEntries(given) as Partial<InMs<T>>;
}
