// docs/spec.md §19 at an OAuth provider's own token and revocation endpoints (decision 161), where an
// agent signs in and refreshes by itself:
//
//   - a refresh with a phantom refresh token is answered here, never forwarded: new phantoms of
//     the login's current tokens; the real login is refreshed first only when custody says it is
//     due (secrets/oauth/refresher.ts: single-flight, under the store's lock);
//   - a refresh with a real refresh token keybroker holds is the same; one it does not hold (an
//     agent signed in before keybroker) is forwarded once and its answer taken into custody;
//   - any other grant (a sign-in: code, device code) is forwarded as it is; a successful answer
//     becomes a login and reaches the agent with phantoms only;
//   - Codex's token exchange sends its id token in the form body: the phantom is swapped for the
//     real id token on this endpoint only, and the exchanged token goes back as a phantom;
//   - a revocation (logout) carrying a phantom is answered here; the login stays.
//
// A refusal meaning "sign in again" (invalid_grant) is given only when the login truly needs
// it: agents such as Claude Code wipe their credentials on it. A passing failure is a 503.
import type { Agent } from "undici";
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { secretForms } from "../../core/scrub.js";
import type { OAuthSpec } from "../../rules/types.js";
import { answerFromLogin, labelFor, loginFromAnswer, phantomAnswer } from "../../secrets/oauth/capture.js";
import { type PhantomBinding, Phantoms } from "../../secrets/oauth/phantoms.js";
import { isExpired, refreshAt } from "../../secrets/oauth/refresher.js";
import type { Exchange } from "../exchange.js";
import { originOf } from "../exchange.js";
import type { OAuthEndpoint } from "../runtime.js";
import { assertClientMayUse } from "./inject.js";

/** The most of a token request or answer read (bodies here are a few KiB). */
const MAX_BODY = 1024 * 1024;

/** Thrown once the stage has answered the client itself: the pipeline records and stops. */
export class AnsweredHere extends Error {
  override name = "AnsweredHere";
}

const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";

interface Body {
  readonly params: Record<string, string>;
  readonly json: boolean;
  /** No body at all (a GET): none is sent on. */
  readonly empty?: boolean;
}

function parseBody(raw: Buffer, contentType: string | undefined): Body | undefined {
  const text = raw.toString("utf8");
  if (/json/i.test(contentType ?? "") || text.trimStart().startsWith("{")) {
    try {
      const value: unknown = JSON.parse(text);
      if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
      const params: Record<string, string> = {};
      for (const [k, v] of Object.entries(value)) if (typeof v === "string") params[k] = v;
      return { params, json: true };
    } catch {
      return undefined;
    }
  }
  return { params: Object.fromEntries(new URLSearchParams(text)), json: false };
}

async function readCapped(stream: Exchange["req"]): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) {
      throw new BrokerError("bad_request", "the token request body is over 1 MiB; nothing was sent", {
        hint: "send a token request of the usual size",
      });
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function decodeURIComponentSafe(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function answer(x: Exchange, status: number, body: unknown): never {
  x.res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  x.res.end(JSON.stringify(body));
  x.status = status;
  throw new AnsweredHere("answered by keybroker");
}

export function createAnswerTokenEndpoint(agent: () => Agent, log: Logger) {
  // Most requests are for no sign-in endpoint: that is settled without a promise (decision 190).
  return function answerTokenEndpoint(x: Exchange): void | Promise<void> {
    if (x.mode === "plain" || !x.rt.hasOAuthEndpoints(x.host, x.port)) return;
    const q = x.path.indexOf("?");
    const endpoint = x.rt.oauthEndpoint(x.host, x.port, q === -1 ? x.path : x.path.slice(0, q));
    // A token check may be a GET (userinfo); the token and revocation endpoints take POSTs only.
    if (endpoint === undefined || (x.method !== "POST" && endpoint.role !== "check")) return;
    return takeIntoCustody(x, endpoint, agent, log);
  };
}

async function takeIntoCustody(
  x: Exchange,
  endpoint: OAuthEndpoint,
  agent: () => Agent,
  log: Logger,
): Promise<void> {
  x.provider ??= endpoint.provider;
  // A client that may not use the provider gets none of its logins (nor phantoms of them).
  if (!x.rt.clientAllows(x.client, endpoint.provider.rule.id))
    assertClientMayUse({ ...x, provider: endpoint.provider });
  const raw = x.body ?? (await readCapped(x.req));
  if (endpoint.role === "check" && raw.length === 0)
    return forwardCheck(x, agent, { params: {}, json: false, empty: true }, endpoint);
  const body = parseBody(raw, x.req.headers["content-type"]);
  if (body === undefined) return forwardAndCapture(x, agent, raw, endpoint, log, true);
  const phantoms = x.rt.phantoms;
  if (endpoint.role === "check") return forwardCheck(x, agent, body, endpoint);
  if (endpoint.role === "revoke") {
    // A logout with a phantom: nothing to tell the server, the login stays (auth remove ends it).
    if (Object.values(body.params).some((v) => phantoms.read(v) !== undefined)) answer(x, 200, {});
    return forwardAndCapture(x, agent, raw, endpoint, log, true);
  }
  const provider = endpoint.provider.rule.id;
  const spec = oauthOf(endpoint);
  if (body.params.grant_type === "refresh_token") {
    // Nous Portal's refresh carries its refresh token in a header, not the body (decision 175).
    const token = body.params.refresh_token ?? headerOf(x.headers, spec?.refreshTokenHeader) ?? "";
    const bound = phantoms.read(token);
    if (bound !== undefined && bound.provider === provider)
      return answerAtHome(x, provider, bound.id, log, spec?.apiBaseField);
    if (bound !== undefined)
      answer(x, 400, { error: "invalid_grant", error_description: "not a token of this server" });
    const held = x.rt.logins?.members(provider).find((e) => e.login.refreshToken === token);
    if (held !== undefined) return answerAtHome(x, provider, held.login.id, log, spec?.apiBaseField);
    return forwardAndCapture(x, agent, raw, endpoint, log);
  }
  if (body.params.grant_type === TOKEN_EXCHANGE && !body.json) {
    const bound = phantoms.read(body.params.subject_token ?? "");
    if (bound !== undefined) {
      const login = x.rt.logins?.get(bound.provider, bound.id)?.login;
      const real = bound.kind === "id" ? login?.idToken : login?.accessToken;
      if (bound.provider !== provider || real === undefined)
        answer(x, 400, {
          error: "invalid_grant",
          error_description: "the token's login is gone: sign in again",
        });
      const form = new URLSearchParams(body.params);
      form.set("subject_token", real);
      return forwardExchange(x, agent, Buffer.from(form.toString()), endpoint, bound.id, log);
    }
  }
  return forwardAndCapture(x, agent, raw, endpoint, log);
}

/** The `oauth:` of the endpoint's provider. */
function oauthOf(endpoint: OAuthEndpoint): OAuthSpec | undefined {
  const rule = endpoint.provider.rule;
  return "oauth" in rule ? rule.oauth : undefined;
}

/** The value of header `name` in a raw header list (names in any case); undefined when absent. */
function headerOf(raw: readonly string[], name: string | undefined): string | undefined {
  if (name === undefined) return undefined;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name.toLowerCase()) return raw[i + 1];
  return undefined;
}

/** A refresh answered from custody: a real one only when due, then the login's phantoms. */
async function answerAtHome(
  x: Exchange,
  provider: string,
  id: string,
  log: Logger,
  apiBaseField: string | undefined,
): Promise<void> {
  const logins = x.rt.logins;
  let entry = logins?.get(provider, id);
  // Not held yet (an import or another broker's sign-in a moment ago): read it once, since the
  // alternative answer, invalid_grant, makes some agents wipe their sign-in.
  if (entry === undefined && logins !== undefined) {
    await logins.reload(provider, id);
    entry = logins.get(provider, id);
  }
  const gone: () => never = () =>
    answer(x, 400, {
      error: "invalid_grant",
      error_description: `keybroker's login ${provider}/${id} needs a new sign-in (keybroker auth add ${provider})`,
    });
  if (entry === undefined || entry.login.state !== "ok") gone();
  const now = Date.now();
  const due = refreshAt(entry.login);
  if (x.rt.refresher !== undefined && (isExpired(entry.login, now) || (due !== undefined && due <= now))) {
    try {
      entry = (await x.rt.refresher.refresh(provider, id, entry.login.accessToken)) ?? entry;
    } catch (err) {
      log.warn({ provider, credential: id }, `refreshing for an agent failed: ${(err as Error).message}`);
      if (isExpired(entry.login)) {
        answer(x, 503, {
          error: "temporarily_unavailable",
          error_description: "keybroker could not refresh the login just now; try again shortly",
        });
      }
    }
    if (entry.login.state !== "ok") gone();
  }
  x.secret = entry.secret;
  answer(x, 200, answerFromLogin(x.rt.phantoms, entry.login, Date.now(), apiBaseField));
}

interface Upstream {
  readonly status: number;
  readonly contentType: string;
  readonly body: Buffer;
}

async function send(
  x: Exchange,
  agent: () => Agent,
  body: Buffer,
  endpoint: OAuthEndpoint,
  path = x.path,
): Promise<Upstream> {
  // No phantom ever reaches the authorization server (docs/spec.md §19): one left here is refused.
  const texts = [body.toString("utf8"), decodeURIComponentSafe(path), ...x.headers];
  if (texts.some((t) => Phantoms.mayHold(t) && x.rt.phantoms.find(t).length > 0)) {
    answer(x, 400, {
      error: "invalid_request",
      error_description: "a keybroker token cannot go to the server",
    });
  }
  const headers: Record<string, string> = {};
  for (let i = 0; i < x.headers.length; i += 2) {
    const name = x.headers[i]!;
    if (name === "content-length" || name === "transfer-encoding" || name === "accept-encoding") continue;
    headers[name] = x.headers[i + 1]!;
  }
  if (x.method === "POST" || body.length > 0) headers["content-length"] = String(body.length);
  headers["accept-encoding"] = "identity";
  try {
    // The upstream agent's own request(): importing undici's index for its `request` would load
    // fetch, WebSocket and the rest into every broker (proxy/upstream.ts).
    const res = await agent().request({
      origin: originOf(x),
      path,
      method: x.method as "POST",
      headers,
      ...(x.method === "POST" || body.length > 0 ? { body } : {}),
      headersTimeout: x.rt.rules.timeouts.upstreamMs,
      bodyTimeout: x.rt.rules.timeouts.upstreamMs,
    });
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BODY) {
        res.body.destroy();
        throw new BrokerError("upstream_unreachable", `${endpoint.url} answered more than 1 MiB`, {
          provider: endpoint.provider.rule.id,
          hint: "try again later",
        });
      }
      chunks.push(chunk);
    }
    return {
      status: res.statusCode,
      contentType: String(res.headers["content-type"] ?? ""),
      body: Buffer.concat(chunks),
    };
  } catch (err) {
    if (err instanceof BrokerError) throw err;
    throw new BrokerError(
      "upstream_unreachable",
      `could not reach ${endpoint.url}: ${(err as Error).message}`,
      {
        provider: endpoint.provider.rule.id,
        hint: "check your network; the agent may try again",
        cause: err,
      },
    );
  }
}

function relay(x: Exchange, up: Upstream): never {
  x.res.writeHead(up.status, {
    "content-type": up.contentType || "application/json",
    "cache-control": "no-store",
  });
  x.res.end(up.body);
  x.status = up.status;
  throw new AnsweredHere("relayed");
}

function jsonOf(up: Upstream): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(up.body.toString("utf8"));
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Forwards the request as it came; an answer holding an access token is taken into custody and
 * reaches the agent with phantoms, whatever its status when `anyStatus` (no token the server
 * hands out reaches the agent as it is), else only a 2xx one. Anything else is relayed.
 */
async function forwardAndCapture(
  x: Exchange,
  agent: () => Agent,
  raw: Buffer,
  endpoint: OAuthEndpoint,
  log: Logger,
  anyStatus = false,
) {
  const up = await send(x, agent, raw, endpoint);
  const json = jsonOf(up);
  const ok = anyStatus || (up.status >= 200 && up.status < 300);
  if (ok && json !== undefined && typeof json.access_token === "string")
    return capture(x, up, json, endpoint, log);
  relay(x, up);
}

/** The answer's tokens stored as a login (durably, before the agent hears of them), phantoms sent. */
async function capture(
  x: Exchange,
  up: Upstream,
  json: Record<string, unknown>,
  endpoint: OAuthEndpoint,
  log?: Logger,
): Promise<void> {
  const logins = x.rt.logins;
  const provider = endpoint.provider.rule.id;
  if (logins === undefined) {
    answer(x, 503, { error: "temporarily_unavailable", error_description: "keybroker keeps no logins here" });
  }
  const draft = loginFromAnswer(provider, "default", json, Date.now(), oauthOf(endpoint)?.apiBaseField);
  const id = labelFor(logins, provider, draft?.account);
  const login = draft === undefined ? undefined : { ...draft, id };
  if (login === undefined) relay(x, up);
  const held = logins.get(provider, id)?.login;
  const stored =
    held === undefined ? login : { ...login, createdAt: held.createdAt, generation: held.generation + 1 };
  await logins.store.put(stored);
  const entry = logins.adopt(stored);
  x.secret = entry.secret;
  log?.info({ provider, credential: id }, "an agent's own sign-in was taken into custody");
  answer(x, up.status, phantomAnswer(x.rt.phantoms, json, provider, id));
}

/**
 * A token check (Google's tokeninfo, the token in a form body): each phantom of this provider
 * is swapped for its login's real token, on this endpoint only, and the answer relayed.
 */
async function forwardCheck(
  x: Exchange,
  agent: () => Agent,
  body: Body,
  endpoint: OAuthEndpoint,
): Promise<void> {
  const provider = endpoint.provider.rule.id;
  const swapped = new Map<string, string>();
  const realOf = (bound: PhantomBinding, token: string): string => {
    const login = bound.provider === provider ? x.rt.logins?.get(provider, bound.id)?.login : undefined;
    const real =
      bound.kind === "id" ? login?.idToken : bound.kind === "access" ? login?.accessToken : undefined;
    if (real === undefined) answer(x, 400, { error: "invalid_token", error_description: "unknown token" });
    swapped.set(real, token);
    // Audited as a credential used, like any swap.
    x.secret ??= x.rt.logins?.get(provider, bound.id)?.secret;
    return real;
  };
  // In the body (a form's access_token) and in the headers (google-auth-library sends a bearer).
  const params = { ...body.params };
  for (const [k, v] of Object.entries(params)) {
    const bound = x.rt.phantoms.read(v);
    if (bound !== undefined) params[k] = realOf(bound, v);
  }
  for (let i = 1; i < x.headers.length; i += 2) {
    for (const { token, binding } of x.rt.phantoms.find(x.headers[i]!))
      x.headers[i] = x.headers[i]!.replace(token, () => realOf(binding, token));
  }
  // And in the query (`tokeninfo?access_token=`), as the URL spells it (encoded or not). The real
  // token goes out in the request only: x.path, which the logs show, keeps the phantom.
  let path = x.path;
  for (const { token, binding } of x.rt.phantoms.find(decodeURIComponentSafe(x.path))) {
    const real = realOf(binding, token);
    path = path.replace(token, () => real).replace(encodeURIComponent(token), () => encodeURIComponent(real));
  }
  const sent =
    body.empty === true ? "" : body.json ? JSON.stringify(params) : new URLSearchParams(params).toString();
  const up = await send(x, agent, Buffer.from(sent), endpoint, path);
  // An echo of the real token (userinfo may repeat what it was given) goes back as the phantom.
  let text = up.body.toString("utf8");
  for (const [real, token] of swapped)
    for (const form of secretForms(real)) text = text.replaceAll(form, () => token);
  relay(x, { ...up, body: Buffer.from(text) });
}

/** Codex's id-token exchange: the exchanged token goes back as an inert phantom (decision 164). */
async function forwardExchange(
  x: Exchange,
  agent: () => Agent,
  body: Buffer,
  endpoint: OAuthEndpoint,
  id: string,
  _log: Logger,
): Promise<void> {
  const up = await send(x, agent, body, endpoint);
  const json = jsonOf(up);
  if (json === undefined || typeof json.access_token !== "string") relay(x, up);
  const provider = endpoint.provider.rule.id;
  const out = { ...json };
  for (const field of ["access_token", "refresh_token", "id_token"]) {
    const real = out[field];
    if (typeof real === "string" && real !== "")
      out[field] = x.rt.phantoms.make(real, { provider, id, kind: "api_key" });
  }
  answer(x, up.status, out);
}
