// Chooses the credential a request uses from its provider's pool, and reads ahead the request
// body when a quota answer may have to be retried on another credential.
import { BrokerError } from "../../core/errors.js";
import { kindOf } from "../../rules/kinds/index.js";
import type { LoginEntry } from "../../secrets/oauth/logins.js";
import { CLIENT_CREDENTIALS_ID, isExpired } from "../../secrets/oauth/refresher.js";
import { describeAttempts } from "../../secrets/resolver.js";
import type { Secret } from "../../secrets/secret.js";
import type { Exchange } from "../exchange.js";
import { replaceHeaders } from "../headers.js";
import { applyCredential, applyHeaderRules } from "./inject.js";

export const DEFAULT_RETRY_BODY_LIMIT = 4 * 1024 * 1024;

/** The ids of the provider's pool: its credential references, or its OAuth logins. */
export function poolIds(x: Exchange): readonly string[] {
  const rule = x.provider!.rule;
  if (!kindOf(rule).poolOfLogins) return rule.credentials;
  return (x.rt.logins?.members(rule.id) ?? []).map((e) => e.login.id);
}

/** A request can move to another credential (or a fallback) when there is one to move to. */
export function hasAlternatives(x: Exchange): boolean {
  const provider = x.provider!;
  return (
    poolIds(x).length > 1 ||
    (x.mode === "reverse" && (x.rt.rules.fallbacks[provider.rule.id]?.length ?? 0) > 0)
  );
}

/** Bodies up to this size are read before the request is sent: one write upstream, not two. */
export const SMALL_BODY = 64 * 1024;

/**
 * Reads the request body into memory when it is small (it has almost always arrived with the
 * headers), or when it may have to be sent again: on another credential, after a refused
 * service-account token, or because SigV4 signs its hash. Bodies of unknown length or above
 * `pool.retry_body_limit` stream as usual (a quota answer to them reaches the client).
 */
export function readBody(x: Exchange): void | Promise<void> {
  if (x.body !== undefined) return;
  const h = x.req.headers;
  if (h["transfer-encoding"] !== undefined) return;
  const length = Number(h["content-length"] ?? 0);
  if (!Number.isSafeInteger(length) || length < 0) return;
  if (length === 0) {
    if (x.injection !== undefined) x.body = Buffer.alloc(0);
    return;
  }
  const replay = x.injection !== undefined && (hasAlternatives(x) || kindOf(x.provider!.rule).signed);
  const limit = replay
    ? Math.max(SMALL_BODY, x.provider!.rule.pool.retryBodyLimit ?? DEFAULT_RETRY_BODY_LIMIT)
    : SMALL_BODY;
  if (length > limit) return;
  return readAll(x, length);
}

/**
 * Reads the whole body (of `length` bytes, declared) into `x.body`, with listeners: an async
 * iterator over the stream costs a generator and several promises per request, a measurable
 * share of the broker's allocations; the one promise here is the one the pipeline waits on.
 */
function readAll(x: Exchange, length: number): void | Promise<void> {
  const req = x.req;
  // Usually the whole body came with the head and waits in the request already (node's
  // IncomingMessage says `complete`): taken at once, without listeners or a promise.
  if (
    (req as { complete?: boolean }).complete === true &&
    req.readableLength === length &&
    req.readableFlowing !== true
  ) {
    const body = req.read(length) as Buffer | null;
    if (body !== null) {
      x.body = body;
      return;
    }
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
    };
    const onEnd = () => {
      done();
      x.body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
      resolve();
    };
    const onError = (err: Error) => {
      done();
      reject(err);
    };
    const onClose = () =>
      onError(Object.assign(new Error("Premature close"), { code: "ERR_STREAM_PREMATURE_CLOSE" }));
    const done = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

type Member = { id: string; fingerprint: string; secret: Secret };

/**
 * Every pool member that has a value now and has not been tried for this request, in pool
 * order. Synchronous when every value is cached (the usual case): no promise per request.
 */
function untriedMembers(x: Exchange): Member[] | Promise<Member[]> {
  const rule = x.provider!.rule;
  if (kindOf(rule).poolOfLogins) return loginMembers(x);
  const out: Member[] = [];
  // No credentials at all: membersWithValues explains that.
  if (rule.credentials.length === 0) return membersWithValues(x);
  for (const ref of rule.credentials) {
    const secret = x.rt.resolver.peek(ref);
    if (secret === undefined)
      return membersWithValues(x).then((all) => all.filter((m) => !x.tried.has(m.id)));
    if (!x.tried.has(ref)) out.push({ id: ref, fingerprint: secret.fingerprint, secret });
  }
  return out;
}

/**
 * The OAuth logins not yet tried that do not need a person. A login whose access token has
 * expired (its refresh ahead of time did not happen: a sleep, a failing server) is refreshed
 * first; none usable at all is `reauth_required`, none with a valid token `credential_unavailable`.
 */
function loginMembers(x: Exchange): Member[] | Promise<Member[]> {
  const rule = x.provider!.rule;
  const all = x.rt.logins?.members(rule.id) ?? [];
  // A phantom stands for its own login only (docs/spec.md §19).
  const entries = x.phantom === undefined ? all : all.filter((e) => e.login.id === x.phantom!.login);
  const now = Date.now();
  // No person logs in: the broker's own client-credentials token is the one member.
  if (!kindOf(rule).personLogins) return clientCredentialsMember(x, entries[0], now);
  const expired = entries.filter(
    (e) => e.login.state === "ok" && !x.tried.has(e.login.id) && isExpired(e.login, now),
  );
  if (expired.length === 0 || x.rt.refresher === undefined) return usableLogins(x, entries, false);
  const refresher = x.rt.refresher;
  return Promise.allSettled(
    expired.map((e) => refresher.refresh(rule.id, e.login.id, e.login.accessToken)),
  ).then((results) =>
    usableLogins(
      x,
      (x.rt.logins?.members(rule.id) ?? []).filter(
        (e) => x.phantom === undefined || e.login.id === x.phantom.login,
      ),
      results.some((r) => r.status === "rejected"),
    ),
  );
}

/**
 * The token of a client_credentials provider: the one held while it is valid (the request
 * path touches nothing else), else fetched now; a fetch that fails is 503 credential_unavailable.
 */
function clientCredentialsMember(
  x: Exchange,
  held: LoginEntry | undefined,
  now: number,
): Member[] | Promise<Member[]> {
  if (x.tried.has(CLIENT_CREDENTIALS_ID)) return [];
  const member = (e: LoginEntry): Member => ({
    id: e.login.id,
    fingerprint: e.secret.fingerprint,
    secret: e.secret,
  });
  if (held !== undefined && !isExpired(held.login, now)) return [member(held)];
  const rule = x.provider!.rule;
  const refresher = x.rt.refresher;
  const unavailable = (why: string) =>
    new BrokerError("credential_unavailable", `provider "${rule.id}" has no access token: ${why}`, {
      provider: rule.id,
      hint: "check oauth.client_id and oauth.client_secret with keybroker check; keybroker will try again",
    });
  if (refresher === undefined) throw unavailable("no refresher");
  return refresher.refresh(rule.id, CLIENT_CREDENTIALS_ID, held?.login.accessToken ?? "").then(
    (entry) => {
      if (entry === undefined) throw unavailable("the provider has no oauth block");
      return [member(entry)];
    },
    (err: Error) => {
      throw unavailable(err.message);
    },
  );
}

function usableLogins(x: Exchange, entries: readonly LoginEntry[], failed: boolean): Member[] {
  const rule = x.provider!.rule;
  const now = Date.now();
  const out: Member[] = [];
  let usable = 0;
  for (const { login, secret } of entries) {
    if (login.state === "reauth_required") continue;
    usable++;
    if (!x.tried.has(login.id) && !isExpired(login, now)) {
      out.push({ id: login.id, fingerprint: secret.fingerprint, secret });
    }
  }
  if (usable === 0) {
    const stuck = entries.map((e) => e.login.id);
    throw new BrokerError(
      "reauth_required",
      stuck.length === 0
        ? `provider "${rule.id}" has no OAuth login`
        : `every OAuth login of provider "${rule.id}" needs a new login: ${stuck.join(", ")}`,
      { provider: rule.id, hint: `keybroker auth add ${rule.id}${labelFlag(stuck[0])}` },
    );
  }
  if (out.length === 0 && x.tried.size === 0) {
    throw new BrokerError(
      "credential_unavailable",
      `no OAuth login of provider "${rule.id}" has a valid access token${failed ? ": refreshing failed, keybroker will try again" : ""}`,
      { provider: rule.id, hint: "retry shortly; keybroker status shows each login's expiry" },
    );
  }
  return out;
}

/** ` --label NAME` for a login other than the default one. */
export function labelFlag(id: string | undefined): string {
  return id === undefined || id === "default" ? "" : ` --label ${id}`;
}

/** Every pool member that has a value now, in pool order. */
async function membersWithValues(x: Exchange): Promise<Member[]> {
  const rule = x.provider!.rule;
  const resolver = x.rt.resolver;
  const out: Member[] = [];
  const reasons: string[] = [];
  for (const ref of rule.credentials) {
    const secret = resolver.peek(ref) ?? (await resolver.resolve(ref)).secret;
    if (secret !== undefined) out.push({ id: ref, fingerprint: secret.fingerprint, secret });
    else reasons.push(`${ref} (${describeAttempts((await resolver.resolve(ref)).attempts)})`);
  }
  if (out.length === 0) {
    const id = rule.id;
    throw new BrokerError(
      "credential_unavailable",
      rule.credentials.length === 0
        ? `provider "${id}" has no credentials configured`
        : `no credential of provider "${id}" has a value: ${reasons.join("; ")}`,
      {
        provider: id,
        hint: `set ${rule.credentials[0] ?? `providers.${id}.credentials`} and run keybroker check`,
      },
    );
  }
  return out;
}

/** Picks a usable credential (not yet tried for this request) and writes it into the request. */
export function pickCredential(x: Exchange): void | Promise<void> {
  // Service-account providers are authorized last, by signRequest.
  if (x.injection === undefined || kindOf(x.provider!.rule).signed) return;
  const members = untriedMembers(x);
  if (members instanceof Promise) return members.then((m) => choose(x, m));
  choose(x, members);
}

function choose(x: Exchange, members: Member[]): void {
  const rule = x.provider!.rule;
  const chosen = x.pools.pick(
    { provider: rule.id, strategy: rule.pool.strategy, affinity: rule.pool.affinity },
    members,
    x.client.rule.name,
  );
  if (chosen === undefined) {
    const ids = poolIds(x);
    const earliest = x.pools.earliestReset(rule.id, ids);
    const seconds = earliest === undefined ? 60 : Math.max(1, Math.ceil((earliest - Date.now()) / 1000));
    const states = ids
      .map((id) => {
        const s = x.pools.get(rule.id, id);
        return `${id}: ${s.state}${s.reason ? ` (${s.reason})` : ""}`;
      })
      .join(", ");
    throw new BrokerError(
      "pool_exhausted",
      `every credential of provider "${rule.id}" is out of quota or rejected: ${states}`,
      {
        provider: rule.id,
        hint: `retry after ${seconds} s, add a credential, or keybroker auth reset ${rule.id}`,
        headers: { "retry-after": String(seconds) },
      },
    );
  }
  x.tried.add(chosen.id);
  applyCredential(x, chosen.secret);
}

/** Authorizes service-account requests, after every other change to the request (docs/spec.md §9). */
export function signRequest(x: Exchange): void | Promise<void> {
  if (x.injection === undefined || x.provider === undefined || !kindOf(x.provider.rule).signed) return;
  return authorize(x, x.provider.rule.id, x.injection);
}

/** Only signed requests pay for a promise: the others return above without one. */
async function authorize(
  x: Exchange,
  provider: string,
  injection: NonNullable<Exchange["injection"]>,
): Promise<void> {
  const auth = x.rt.upstreamAuth.get(provider);
  if (auth === undefined) throw new Error(`no authorizer for provider ${provider}`);
  // A retry starts again from the request as the client sent it.
  replaceHeaders(x.headers, injection.headers);
  x.path = injection.path;
  applyHeaderRules(x);
  await auth.authorize(x);
}
