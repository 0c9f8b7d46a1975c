// Placeholders: non-secret stand-ins, stable per (client, provider), derived from the home's
// key so that `env` can print them without any real secret, before or without a broker.
import { createHmac } from "node:crypto";
import type { ProviderRule } from "../rules/types.js";

/** What every derived placeholder holds after its provider's prefix. */
const DERIVED_MARK = "kbph-";

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

function base62(bytes: Buffer, length: number): string {
  let out = "";
  for (let i = 0; out.length < length; i++) out += ALPHABET[bytes[i % bytes.length]! % 62];
  return out;
}

export function placeholderFor(homeKey: Buffer, client: string, provider: ProviderRule): string {
  if (provider.placeholder.value !== undefined) return provider.placeholder.value;
  const mac = createHmac("sha256", homeKey).update(`placeholder\0${client}\0${provider.id}`).digest();
  return `${provider.placeholder.prefix}${DERIVED_MARK}${base62(mac, 32)}`;
}

export interface PlaceholderOwner {
  readonly client: string;
  readonly provider: string;
  /** A fixed `placeholder.value`: every client of the provider uses the same one. */
  readonly shared: boolean;
}

/**
 * Every placeholder of a rule set, with a single pattern that finds any of them in a text.
 * Built once per rule load; the request path only runs the pattern.
 */
export class PlaceholderIndex {
  readonly #owners = new Map<string, PlaceholderOwner>();
  /** client → provider → placeholder: found per request without building a key string. */
  readonly #byClient = new Map<string, Map<string, string>>();
  readonly pattern: RegExp | undefined;
  /**
   * Text every placeholder holds (`needleOf`): a text without it holds none, and a plain
   * substring search says so for less than the pattern costs. Most header values are such texts.
   */
  readonly #needle: string | undefined;
  /** The shortest placeholder: a shorter text holds none (decision 190). */
  readonly #shortest: number;

  constructor(homeKey: Buffer, clients: readonly string[], providers: readonly ProviderRule[]) {
    for (const client of clients) {
      for (const provider of providers) {
        const value = placeholderFor(homeKey, client, provider);
        let byProvider = this.#byClient.get(client);
        if (byProvider === undefined) {
          byProvider = new Map();
          this.#byClient.set(client, byProvider);
        }
        byProvider.set(provider.id, value);
        // A fixed placeholder is shared by every client: the first one owns it.
        if (!this.#owners.has(value)) {
          this.#owners.set(value, {
            client,
            provider: provider.id,
            shared: provider.placeholder.value !== undefined,
          });
        }
      }
    }
    const all = [...this.#owners.keys()].sort((a, b) => b.length - a.length);
    this.pattern = all.length === 0 ? undefined : new RegExp(all.map(escapeRegExp).join("|"), "g");
    this.#needle = needleOf(all);
    this.#shortest = all.at(-1)?.length ?? 0;
  }

  get(client: string, provider: string): string | undefined {
    return this.#byClient.get(client)?.get(provider);
  }

  /** Every placeholder with its owner. */
  entries(): IterableIterator<[string, PlaceholderOwner]> {
    return this.#owners.entries();
  }

  owner(placeholder: string): PlaceholderOwner | undefined {
    return this.#owners.get(placeholder);
  }

  /** Every placeholder found in `text`, in order (most texts have none: no array is made then). */
  find(text: string): readonly string[] {
    if (this.pattern === undefined || text.length < this.#shortest) return NONE;
    if (this.#needle !== undefined && !text.includes(this.#needle)) return NONE;
    this.pattern.lastIndex = 0;
    return text.match(this.pattern) ?? NONE;
  }
}

const NONE: readonly string[] = Object.freeze([]);

/**
 * A text every placeholder holds, long enough to be rare: their common start (fixed values
 * often share one), else the mark derived ones hold after their provider's prefix; undefined
 * when a fixed value holds neither.
 */
function needleOf(all: readonly string[]): string | undefined {
  if (all.length === 0) return undefined;
  let common = all[0]!;
  for (const p of all) {
    let n = 0;
    while (n < common.length && n < p.length && common.charCodeAt(n) === p.charCodeAt(n)) n++;
    common = common.slice(0, n);
  }
  if (common.length >= DERIVED_MARK.length) return common;
  return all.every((p) => p.includes(DERIVED_MARK)) ? DERIVED_MARK : undefined;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
