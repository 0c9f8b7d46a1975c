// Pending approvals in a fleet's Redis (docs/spec.md §16, §17): the ApprovalStore of fleet mode, so any
// broker's CLI or admin page answers a request another broker holds.
//
// - A held request is a key `<prefix>approval:<id>` (its JSON: the fields every view shows and a
//   scrubbed preview, never a header) that expires a little after the request's own expiresAt,
//   listed through the sorted set `<prefix>approvals` (by heldAt), pruned as it is read.
// - `take` is one script on the server (GET and DEL): of approve, deny, timeout and withdraw
//   across the fleet exactly one gets the request. The winner's answer is kept a minute as
//   `<prefix>approval-answer:<id>` and published on the fleet's channel, so the holder wakes (and
//   finds it even when it missed the message) and every broker's live views change.
// - `--for` grants are the hash `<prefix>approval-grants` (extend-only). Each broker keeps a copy
//   in memory, current from the channel and loaded whenever the connection (re)opens: the
//   request path asks `grantedUntil` and never waits on Redis for it.
//
// Redis down or slow: a broker still holds and answers its own requests from memory (decision
// 82). A request held meanwhile joins the fleet's list when Redis is back; one ended meanwhile
// is removed from it.
//
// Whoever can write to Redis without the home key is an attacker (decisions 84, 90, 96): every
// value and message here is sealed with the fleet's TokenCipher, bound to its key (and field) or
// to the channel. A pending value is `<expiresAt>:<sealed>` (the expiry also in clear, for the
// take script, and bound into the seal), a grant `<until>:<sealed>`; a message carries the time it
// was sent, and one older than a minute is dropped. What does not open, or is not the shape it
// must be, is skipped one by one: never thrown, never reported as a connection failure.
import type { Redis } from "ioredis";
import type { TokenCipher } from "../redis/cipher.js";
import type { FleetMessage } from "../redis/keys.js";
import { grantIn } from "./grants.js";
import type { Answer, ApprovalChange, ApprovalStore, HeldRequest } from "./store.js";

/** A pending key outlives its request by this much, so the holder's own timeout still finds it. */
const GRACE_MS = 10_000;
/** How long an answer stays readable for a holder that missed its message. */
const ANSWER_TTL_MS = 60_000;
/** The holder waits this long for Redis to settle a timeout or a hang-up, then decides alone. */
const TAKE_WAIT_MS = 1_000;
/** A holder whose request another broker took waits this long for the answer, then times out. */
const CHASE_MS = 3_000;
const CHASE_EVERY_MS = 100;
/** A message sent longer ago than this (or this far ahead, a skewed clock) is dropped. */
const MESSAGE_MAX_AGE_MS = 60_000;

/**
 * KEYS: pending key, index. ARGV: value, ttl ms, heldAt, id, channel, message. 1 when added, else
 * the value already there (this request's own, added before; or another's that drew the same id).
 */
const ADD_SCRIPT = `
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
  return 1
end
return redis.call('GET', KEYS[1])
`;

/**
 * The one atomic step. KEYS: pending key, index. ARGV: id, now (0: the holder, who may take its
 * own request at its expiry; others may not take an expired one).
 */
const TAKE_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if not v then return false end
local now = tonumber(ARGV[2])
if now > 0 then
  local expires = tonumber(string.match(v, '^(%d+):'))
  if not expires or expires <= now then return false end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return v
`;

/**
 * KEYS: index. ARGV: pending key prefix. Every pending request as id, value, id, value…; ids whose
 * key expired are dropped.
 */
const LIST_SCRIPT = `
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then
    table.insert(out, id)
    table.insert(out, v)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
`;

/** KEYS: answer key. ARGV: answer, ttl ms, channel, message. */
const ANSWER_SCRIPT = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`;

/** Extend-only. KEYS: grants hash. ARGV: grant key, until, value, channel, message. */
const GRANT_SCRIPT = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local held = cur and tonumber(string.match(cur, '^(%d+):'))
if held and held >= tonumber(ARGV[2]) then return cur end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return ARGV[3]
`;

type Scripts = Record<string, (...args: string[]) => Promise<unknown>>;

/** What brokers tell each other about approvals (the `m` of a fleet message of type `approval`). */
type ApprovalMessage =
  | { readonly k: "held"; readonly id: string }
  | { readonly k: "answer"; readonly a: Answer }
  | { readonly k: "grant"; readonly g: string; readonly u: number };

const OUTCOMES = new Set(["approved", "denied", "approval_timeout", "withdrawn"]);
const isString = (x: unknown): x is string => typeof x === "string";
const isTime = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x) && x >= 0;

/** A held request as every broker writes it (a broker of another version, or a bad write, is not). */
function isHeld(x: unknown): x is HeldRequest {
  if (typeof x !== "object" || x === null) return false;
  const h = x as Record<string, unknown>;
  return (
    isString(h.id) &&
    /^[0-9a-f]{8}$/.test(h.id) &&
    ["client", "provider", "method", "host", "path", "rule", "preview"].every((f) => isString(h[f])) &&
    isTime(h.heldAt) &&
    isTime(h.expiresAt)
  );
}

function isAnswer(x: unknown): x is Answer {
  if (typeof x !== "object" || x === null) return false;
  const a = x as Record<string, unknown>;
  return (
    isHeld(a.held) &&
    isString(a.outcome) &&
    OUTCOMES.has(a.outcome) &&
    (a.by === undefined || isString(a.by)) &&
    (a.until === undefined || isTime(a.until))
  );
}

function isMessage(x: unknown): x is ApprovalMessage & { readonly at: number } {
  if (typeof x !== "object" || x === null) return false;
  const m = x as Record<string, unknown>;
  if (!isTime(m.at)) return false;
  if (m.k === "held") return isString(m.id);
  if (m.k === "answer") return isAnswer(m.a);
  return m.k === "grant" && isString(m.g) && isTime(m.u);
}

/** The same request: an answer is for the request its holder holds, not one that drew its id. */
function sameRequest(a: HeldRequest, b: HeldRequest): boolean {
  return (
    a.id === b.id &&
    a.heldAt === b.heldAt &&
    a.client === b.client &&
    a.provider === b.provider &&
    a.method === b.method &&
    a.host === b.host &&
    a.path === b.path &&
    a.rule === b.rule
  );
}

/** JSON.parse that gives undefined for what is not JSON. */
function parse(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A request this broker holds. */
interface Own {
  readonly held: HeldRequest;
  /** In Redis: the fleet sees it, and Redis decides who takes it. */
  shared: boolean;
  /** Taken here; its answer is on its way. */
  taken: boolean;
  /** Its add, while on its way to Redis. */
  adding?: Promise<void>;
  /** Ended here without Redis deciding: it must not stay in the fleet's list. */
  local?: boolean;
  /** Another broker's request in Redis drew the same id: this one stays this broker's alone. */
  clash?: boolean;
}

export interface RedisApprovalOptions {
  readonly prefix: string;
  readonly channel: string;
  /** This broker's id in fleet messages. */
  readonly self: string;
  /** Every failure is also a health signal (the state goes degraded). */
  readonly onError: (err: Error) => void;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());

export class RedisApprovalStore implements ApprovalStore {
  readonly #redis: Redis;
  readonly #cipher: TokenCipher;
  readonly #opts: RedisApprovalOptions;
  readonly #index: string;
  readonly #grantsKey: string;
  readonly #own = new Map<string, Own>();
  /** Own requests shared, then ended here while Redis did not answer: removed once it does. */
  readonly #ended = new Set<string>();
  /** `--for` grants, the fleet's, as last heard. */
  readonly #grants = new Map<string, number>();
  readonly #listeners: ((answer: Answer) => void)[] = [];
  readonly #watchers: ((change: ApprovalChange) => void)[] = [];
  #closed = false;

  constructor(redis: Redis, cipher: TokenCipher, opts: RedisApprovalOptions) {
    this.#redis = redis;
    this.#cipher = cipher;
    this.#opts = opts;
    this.#index = `${opts.prefix}approvals`;
    this.#grantsKey = `${opts.prefix}approval-grants`;
    redis.defineCommand("kbApprovalAdd", { numberOfKeys: 2, lua: ADD_SCRIPT });
    redis.defineCommand("kbApprovalTake", { numberOfKeys: 2, lua: TAKE_SCRIPT });
    redis.defineCommand("kbApprovalList", { numberOfKeys: 1, lua: LIST_SCRIPT });
    redis.defineCommand("kbApprovalAnswer", { numberOfKeys: 1, lua: ANSWER_SCRIPT });
    redis.defineCommand("kbApprovalGrant", { numberOfKeys: 1, lua: GRANT_SCRIPT });
  }

  get #scripts(): Scripts {
    return this.#redis as unknown as Scripts;
  }

  #key(id: string): string {
    return `${this.#opts.prefix}approval:${id}`;
  }

  #answerKey(id: string): string {
    return `${this.#opts.prefix}approval-answer:${id}`;
  }

  /** What messages are bound to (the channel: another fleet's messages do not open here). */
  get #messageName(): string {
    return `${this.#opts.channel}\0approval`;
  }

  #message(m: ApprovalMessage): string {
    const sealed = this.#cipher.seal(JSON.stringify({ ...m, at: Date.now() }), this.#messageName);
    const message: FleetMessage = { t: "approval", m: sealed, from: this.#opts.self };
    return JSON.stringify(message);
  }

  /** A pending value: the expiry in clear (the take script reads it), and bound into the seal. */
  #sealHeld(held: HeldRequest): string {
    const { expiresAt } = held;
    return `${expiresAt}:${this.#cipher.seal(JSON.stringify(held), `${this.#key(held.id)}\0${expiresAt}`)}`;
  }

  #openHeld(id: string, value: string): HeldRequest | undefined {
    const m = /^(\d+):(.*)$/s.exec(value);
    if (m === null) return undefined;
    const held = parse(this.#cipher.open(m[2]!, `${this.#key(id)}\0${m[1]}`));
    return isHeld(held) && held.id === id && held.expiresAt === Number(m[1]) ? held : undefined;
  }

  #openAnswer(id: string, value: string): Answer | undefined {
    const answer = parse(this.#cipher.open(value, this.#answerKey(id)));
    return isAnswer(answer) && answer.held.id === id ? answer : undefined;
  }

  #grantName(key: string, until: number): string {
    return `${this.#grantsKey}\0${key}\0${until}`;
  }

  #openGrant(key: string, value: string): number | undefined {
    const m = /^(\d+):(.*)$/s.exec(value);
    if (m === null) return undefined;
    const until = Number(m[1]);
    return this.#cipher.open(m[2]!, this.#grantName(key, until)) === m[1] ? until : undefined;
  }

  #failed(err: unknown): void {
    this.#opts.onError(err as Error);
  }

  /** Held from now on, here; the fleet sees it once Redis has it (the hold never waits on Redis). */
  async add(held: HeldRequest): Promise<void> {
    const own: Own = { held, shared: false, taken: false };
    this.#own.set(held.id, own);
    own.adding = this.#share(own);
  }

  /** Puts an own request in Redis (NX: never over one that is there). */
  async #share(own: Own): Promise<void> {
    const { held } = own;
    let added: unknown;
    try {
      added = await this.#scripts.kbApprovalAdd!(
        this.#key(held.id),
        this.#index,
        this.#sealHeld(held),
        String(Math.max(1, held.expiresAt - Date.now()) + GRACE_MS),
        String(held.heldAt),
        held.id,
        this.#opts.channel,
        this.#message({ k: "held", id: held.id }),
      );
    } catch (err) {
      this.#failed(err);
      return;
    }
    own.adding = undefined;
    if (added !== 1) {
      // Already there: this very request (an add that landed late), or another broker's with the
      // same id (8 hex characters can clash), which this one must not be confused with.
      const there = typeof added === "string" ? this.#openHeld(held.id, added) : undefined;
      if (there === undefined || !sameRequest(there, held)) {
        own.clash = true;
        return;
      }
    }
    own.clash = false;
    own.shared = true;
    // Ended here while its add was on its way (a slow Redis): it leaves the list again.
    if (own.local) await this.#unshare(held.id);
  }

  async #unshare(id: string): Promise<void> {
    try {
      await this.#redis.multi().del(this.#key(id)).zrem(this.#index, id).exec();
      this.#ended.delete(id);
    } catch (err) {
      this.#ended.add(id);
      this.#failed(err);
    }
  }

  async list(): Promise<HeldRequest[]> {
    const now = Date.now();
    const out = new Map<string, HeldRequest>();
    try {
      const values = (await this.#scripts.kbApprovalList!(this.#index, this.#key(""))) as string[];
      for (let i = 0; i + 1 < values.length; i += 2) {
        // One that does not open (forged, or from another fleet) is left out, alone.
        const held = this.#openHeld(values[i]!, values[i + 1]!);
        if (held !== undefined && !this.#ended.has(held.id)) out.set(held.id, held);
      }
    } catch (err) {
      // Degraded: this broker's own requests are all it can show.
      this.#failed(err);
    }
    for (const own of this.#own.values()) {
      // A clash: this broker shows its own request under that id, not the other broker's.
      if (own.taken) out.delete(own.held.id);
      else out.set(own.held.id, own.held);
    }
    return [...out.values()].filter((h) => h.expiresAt > now);
  }

  async take(id: string): Promise<HeldRequest | undefined> {
    const own = this.#own.get(id);
    if (own !== undefined) return own.taken ? undefined : this.#takeOwn(own);
    try {
      const v = (await this.#scripts.kbApprovalTake!(this.#key(id), this.#index, id, String(Date.now()))) as
        | string
        | null;
      // A value that does not open was not a request (the script removed it all the same).
      return v === null ? undefined : this.#openHeld(id, v);
    } catch (err) {
      // Another broker's request cannot be answered without Redis: it is not pending here.
      this.#failed(err);
      return undefined;
    }
  }

  /**
   * The holder takes its own request (approved or denied here, timed out, withdrawn). Redis
   * decides while it answers; when it does not (soon enough), the holder decides alone.
   */
  async #takeOwn(own: Own): Promise<HeldRequest | undefined> {
    const { id } = own.held;
    own.taken = true;
    const deadline = Date.now() + TAKE_WAIT_MS;
    // An add on its way may land first: then Redis decides (another broker may have taken it).
    if (!own.shared && own.adding !== undefined) await Promise.race([own.adding, sleep(TAKE_WAIT_MS)]);
    if (!own.shared && own.clash) return own.held;
    if (!own.shared) {
      // Its add may still land (a stalled Redis runs it late): removed then, or at the next resync.
      own.local = true;
      this.#ended.add(id);
      return own.held;
    }
    const taking = this.#scripts.kbApprovalTake!(this.#key(id), this.#index, id, "0") as Promise<
      string | null
    >;
    const result = await Promise.race([
      taking.then(
        (v) => (v === null ? "lost" : "won"),
        (err: unknown) => {
          this.#failed(err);
          return "unknown" as const;
        },
      ),
      sleep(Math.max(0, deadline - Date.now())).then(() => "unknown" as const),
    ]);
    if (result === "won") return own.held;
    if (result === "unknown") {
      own.local = true;
      this.#ended.add(id);
      return own.held;
    }
    // Another broker took it first: its answer comes by message, or is read from Redis.
    this.#chasing(own);
    return undefined;
  }

  #chasing(own: Own): void {
    this.#chase(own).catch(() => {
      // Never thrown out of the loop; whatever went wrong, the holder does not wait forever.
      if (this.#own.get(own.held.id) === own) this.#deliver({ held: own.held, outcome: "approval_timeout" });
    });
  }

  /**
   * Waits for the answer to an own request another broker took; a lost answer is a timeout, and so
   * is one that does not open or is for another request.
   */
  async #chase(own: Own): Promise<void> {
    const { id } = own.held;
    const deadline = Date.now() + CHASE_MS;
    while (!this.#closed && this.#own.get(id) === own) {
      const text = await this.#redis.get(this.#answerKey(id)).catch(() => null);
      if (this.#own.get(id) !== own) return;
      const answer = text === null ? undefined : this.#openAnswer(id, text);
      if (answer !== undefined && sameRequest(answer.held, own.held)) {
        this.#deliver(answer);
        return;
      }
      if (Date.now() >= deadline) {
        this.#deliver({ held: own.held, outcome: "approval_timeout" });
        return;
      }
      await sleep(CHASE_EVERY_MS);
    }
  }

  /** In force here at once; Redis has it a round trip later (callers need not wait for that). */
  async grant(key: string, until: number): Promise<void> {
    this.#merge(key, until);
    await this.#sendGrant(key, until);
  }

  async #sendGrant(key: string, until: number): Promise<void> {
    try {
      await this.#scripts.kbApprovalGrant!(
        this.#grantsKey,
        key,
        String(until),
        `${until}:${this.#cipher.seal(String(until), this.#grantName(key, until))}`,
        this.#opts.channel,
        this.#message({ k: "grant", g: key, u: until }),
      );
    } catch (err) {
      // Kept here; pushed when Redis answers again (resync).
      this.#failed(err);
    }
  }

  #merge(key: string, until: number): void {
    if (until > (this.#grants.get(key) ?? 0)) this.#grants.set(key, until);
  }

  async grantedUntil(key: string, now: number): Promise<number | undefined> {
    return grantIn(this.#grants, key, now);
  }

  async publish(answer: Answer): Promise<void> {
    this.#deliver(answer);
    try {
      const { id } = answer.held;
      await this.#scripts.kbApprovalAnswer!(
        this.#answerKey(id),
        this.#cipher.seal(JSON.stringify(answer), this.#answerKey(id)),
        String(ANSWER_TTL_MS),
        this.#opts.channel,
        this.#message({ k: "answer", a: answer }),
      );
    } catch (err) {
      this.#failed(err);
    }
  }

  subscribe(listener: (answer: Answer) => void): void {
    this.#listeners.push(listener);
  }

  watch(listener: (change: ApprovalChange) => void): void {
    this.#watchers.push(listener);
  }

  #deliver(answer: Answer): void {
    const own = this.#own.get(answer.held.id);
    // Another request that drew the same id (or a forged one): not this holder's answer.
    if (own !== undefined && !sameRequest(own.held, answer.held)) return;
    this.#own.delete(answer.held.id);
    for (const listener of this.#listeners) listener(answer);
  }

  /**
   * A fleet message of type `approval` from another broker: dropped unless it opens with the
   * fleet's key, has the right shape and was sent within the last minute (never thrown: it runs
   * inside the subscriber's event).
   */
  received(text: unknown): void {
    try {
      const m = isString(text) ? parse(this.#cipher.open(text, this.#messageName)) : undefined;
      if (!isMessage(m) || Math.abs(Date.now() - m.at) > MESSAGE_MAX_AGE_MS) return;
      if (m.k === "held") {
        for (const w of this.#watchers) w({ type: "held", id: m.id });
      } else if (m.k === "answer") {
        this.#deliver(m.a);
      } else {
        this.#merge(m.g, m.u);
      }
    } catch {
      // A listener's failure is its own; the subscriber goes on.
    }
  }

  /**
   * The connection (re)opened: grants merged both ways; requests ended here meanwhile leave the
   * fleet's list, those held here meanwhile (or all, when Redis lost its data) join it; an own
   * request that vanished was taken by another broker, whose answer is fetched.
   */
  async resync(lostData: boolean): Promise<void> {
    const r = this.#redis;
    const now = Date.now();
    for (const [key, until] of this.#grants) if (until > now) await this.#sendGrant(key, until);
    for (const [key, text] of Object.entries(await r.hgetall(this.#grantsKey))) {
      const until = this.#openGrant(key, text);
      // One that does not open is no grant (left there: extend-only, a real one may follow).
      if (until === undefined) continue;
      if (until > now) this.#merge(key, until);
      else await r.hdel(this.#grantsKey, key);
    }
    for (const id of [...this.#ended]) await this.#unshare(id);
    for (const own of [...this.#own.values()]) {
      if (own.taken) continue;
      if (!own.shared || lostData) await this.#share(own);
      else if ((await r.exists(this.#key(own.held.id))) === 0) {
        own.taken = true;
        this.#chasing(own);
      }
    }
  }

  /** The broker stops: what it held leaves the fleet's list (best effort, 1 s at most). */
  async close(): Promise<void> {
    this.#closed = true;
    const ids = [...[...this.#own.values()].filter((o) => !o.clash).map((o) => o.held.id), ...this.#ended];
    if (ids.length === 0) return;
    const removing = this.#redis.multi();
    for (const id of ids) removing.del(this.#key(id)).zrem(this.#index, id);
    await Promise.race([removing.exec().catch(() => {}), sleep(TAKE_WAIT_MS)]);
  }
}
