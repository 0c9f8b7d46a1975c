// The admin page's views, rendered on the server. Each view has a live part (what the page's
// script fetches again every few seconds from /admin/part/<view>) inside a frame (navigation,
// forms that must not be replaced while a person types).
import type { AuditRecord } from "../audit/audit-log.js";
import { AUDIT_DECISIONS } from "../audit/audit-log.js";
import { isLinkableUrl } from "../secrets/oauth/verification-url.js";
import type { ApprovalView } from "../state/approvals/store.js";
import type { AdminRole } from "../state/sessions/store.js";
import type { StateHealth } from "../state/shared-state.js";
import type { AuditFilter, ChainState } from "./audit-view.js";
import type { DeviceLoginState } from "./device-logins.js";
import { formatBytes, type Html, html, relative } from "./html.js";
import { formatUptime, type ProviderStatus, type StatusReport } from "./status.js";
import type { UsageRow } from "./usage.js";

export const VIEWS = {
  overview: { path: "/admin/", title: "Overview" },
  approvals: { path: "/admin/approvals", title: "Approvals" },
  audit: { path: "/admin/audit", title: "Audit" },
  usage: { path: "/admin/usage", title: "Usage" },
  actions: { path: "/admin/actions", title: "Actions" },
} as const;

export type ViewName = keyof typeof VIEWS;

/** What every form that changes something carries. */
export interface FormContext {
  readonly csrf: string;
  readonly role: AdminRole;
}

function csrfField(f: FormContext): Html {
  return html`<input type="hidden" name="csrf" value="${f.csrf}">`;
}

function documentShell(title: string, body: Html, bodyClass = ""): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="referrer" content="same-origin">
<title>${title} · keybroker</title>
<link rel="stylesheet" href="/admin/static/admin.css">
<link rel="icon" href="/admin/static/icon.svg" type="image/svg+xml">
<script src="/admin/static/admin.js" defer></script>
</head>
<body class="${bodyClass}">
${body}
</body>
</html>
`;
}

export function pageShell(
  view: ViewName,
  f: FormContext,
  live: Html,
  opts: { flash?: { kind: "ok" | "error"; text: string } | undefined; query?: string; frame?: Html } = {},
  pendingCount = 0,
): Html {
  const nav = (Object.keys(VIEWS) as ViewName[]).map(
    (v) =>
      html`<a href="${VIEWS[v].path}"${v === view ? html` aria-current="page"` : ""}>${VIEWS[v].title}${
        v === "approvals" && pendingCount > 0 ? html` <span class="count">${pendingCount}</span>` : ""
      }</a>`,
  );
  const flash =
    opts.flash === undefined
      ? ""
      : html`<p class="flash ${opts.flash.kind}" role="status">${opts.flash.text}</p>`;
  const body = html`<header class="top">
  <a class="brand" href="/admin/"><span class="logo" aria-hidden="true"></span>keybroker</a>
  <nav aria-label="Views">${nav}</nav>
  <form class="logout" method="post" action="/admin/logout">${csrfField(f)}<span class="who">${f.role}</span><button type="submit" class="link">Log out</button></form>
</header>
<main>
<h1>${VIEWS[view].title}</h1>
${flash}
${opts.frame ?? ""}
<div class="live" data-live="/admin/part/${view}${opts.query ? `?${opts.query}` : ""}">${live}</div>
<p class="updated" aria-live="off">Live · <span data-updated>updated now</span></p>
</main>`;
  return documentShell(VIEWS[view].title, body);
}

export function loginPage(opts: {
  message?: string | undefined;
  code?: string | undefined;
  tls: boolean;
  hasPassword: boolean;
}): Html {
  const note =
    opts.message === undefined ? "" : html`<p class="flash error" role="alert">${opts.message}</p>`;
  const form =
    opts.code !== undefined
      ? html`<form method="post" action="/admin/login" class="login">
  <input type="hidden" name="code" value="${opts.code}">
  <p>This one-time link from <code>keybroker admin</code> logs this browser in.</p>
  <button type="submit" class="primary">Log in</button>
</form>`
      : html`<form method="post" action="/admin/login" class="login">
  <label for="secret">Password or admin token</label>
  <input id="secret" name="secret" type="password" autocomplete="current-password" required autofocus>
  <button type="submit" class="primary">Log in</button>
</form>
<p class="hint">${
          opts.hasPassword
            ? "Use the password set with keybroker admin password, an owner or admin client's token, or"
            : "No password is set yet (keybroker admin password sets one). Use an owner or admin client's token, or"
        } open the one-time link that <code>keybroker admin</code> prints on this machine.</p>`;
  return documentShell(
    "Log in",
    html`<main class="login-box">
<div class="brand big"><span class="logo" aria-hidden="true"></span>keybroker</div>
<h1>Admin page</h1>
${note}
${form}
${opts.tls ? "" : html`<p class="hint small">Served on loopback; off loopback the page is served over TLS only.</p>`}
</main>`,
    "login",
  );
}

/**
 * What a view's address answers to the cookie alone (decision 104): a frame with no data, whose
 * script loads the view again with the session's page secret (or goes to the login page).
 */
export function loadingPage(title: string): Html {
  return documentShell(
    title,
    html`<main class="login-box" data-load><div class="brand big"><span class="logo" aria-hidden="true"></span>keybroker</div><p class="hint">Loading…</p></main>`,
    "login",
  );
}

/** The answer to a login: the page's script keeps the page secret in this origin's storage, then opens `next`. */
export function sessionPage(secret: string, next: string): Html {
  return documentShell(
    "Logging in",
    html`<main class="login-box" data-session="${secret}" data-next="${next}"><div class="brand big"><span class="logo" aria-hidden="true"></span>keybroker</div><p class="hint">Logging in…</p></main>`,
    "login",
  );
}

/** A page for a refused request (a form without its CSRF token, an unknown path). */
export function messagePage(title: string, text: string): Html {
  return documentShell(
    title,
    html`<main class="login-box"><div class="brand big"><span class="logo" aria-hidden="true"></span>keybroker</div><h1>${title}</h1><p>${text}</p><p><a href="/admin/">Back to the admin page</a></p></main>`,
    "login",
  );
}

const STATE_LABEL: Record<string, string> = {
  ok: "ok",
  usage_limit_reached: "rate limited",
  invalid: "invalid",
  missing: "no value",
  reauth_required: "login needed",
};

function stateBadge(state: string): Html {
  const kind =
    state === "ok" ? "ok" : state === "usage_limit_reached" ? "warn" : state === "missing" ? "muted" : "bad";
  return html`<span class="badge ${kind}">${STATE_LABEL[state] ?? state}</span>`;
}

function shortFingerprint(fp: string | undefined): string {
  if (fp === undefined) return "—";
  return fp.length > 23 ? `${fp.slice(0, 23)}…` : fp;
}

function providerCard(p: ProviderStatus, f: FormContext): Html {
  const rows = p.credentials.map((c) => {
    const marked = c.state === "usage_limit_reached" || c.state === "invalid";
    const until = c.until === undefined ? "—" : relative(c.until);
    const expires = c.source === "oauth" ? (relative(c.expiresAt) ?? "unknown") : "—";
    return html`<tr>
<td data-label="Credential"><code>${c.id}</code></td>
<td data-label="Source">${c.source ?? "—"}</td>
<td data-label="Fingerprint"><code class="fp" title="${c.fingerprint ?? ""}">${shortFingerprint(c.fingerprint)}</code></td>
<td data-label="State">${stateBadge(c.state)}${c.reason === undefined ? "" : html` <span class="reason">${c.reason}</span>`}</td>
<td data-label="Mark ends">${until}</td>
<td data-label="Token expires">${expires}</td>
<td data-label="Requests" class="num">${c.requests}</td>
<td class="act">${
      marked
        ? html`<form method="post" action="/admin/do/reset">${csrfField(f)}<input type="hidden" name="provider" value="${p.id}"><input type="hidden" name="credential" value="${c.id}"><input type="hidden" name="back" value="overview"><button type="submit" class="small">Reset mark</button></form>`
        : ""
    }</td>
</tr>`;
  });
  const where = [...p.hosts, ...(p.mount ? [p.mount] : [])];
  return html`<article class="card provider" id="provider-${p.id}">
<header><h3>${p.id}</h3>${p.active ? html`<span class="badge ok">active</span>` : html`<span class="badge muted">inactive</span>`}<span class="hosts">${where.join(" · ")}</span></header>
${
  p.credentials.length === 0
    ? html`<p class="empty">${p.note ?? "No credential."}</p>`
    : html`<table class="creds"><thead><tr><th>Credential</th><th>Source</th><th>Fingerprint</th><th>State</th><th>Mark ends</th><th>Token expires</th><th class="num">Requests</th><th><span class="sr">Action</span></th></tr></thead><tbody>${rows}</tbody></table>`
}
</article>`;
}

/** docs/spec.md §17: where marks, logins and sessions are shared, and `degraded since …` while Redis is away. */
function sharedStateFact(s: StateHealth | undefined): Html {
  if (s === undefined || s.store === "home") {
    return html`<div class="fact wide" id="shared-state"><span class="k">Shared state</span><span class="v">home <span class="reason">(the brokers of this machine)</span></span></div>`;
  }
  const where = html`redis <code class="wrap">${withoutPassword(s.url ?? "")}</code> · prefix <code>${s.prefix ?? ""}</code>`;
  const health =
    s.degradedSince === undefined
      ? html`<span class="badge ok">ok</span>`
      : html`<span class="badge bad">degraded since <time datetime="${s.degradedSince}">${s.degradedSince.slice(11, 19)} UTC</time></span> <span class="reason">${relative(s.degradedSince)}: ${s.error ?? "unreachable"}; serving from memory, no OAuth refresh</span>`;
  return html`<div class="fact wide" id="shared-state"><span class="k">Shared state</span><span class="v">${where} ${health}</span></div>`;
}

function withoutPassword(url: string): string {
  try {
    const u = new URL(url);
    if (u.password === "") return url;
    u.password = "";
    return u.toString();
  } catch {
    return "";
  }
}

export function overviewPart(report: StatusReport, f: FormContext): Html {
  const audit = report.audit ?? [];
  const auditText =
    audit.length === 0
      ? "off"
      : audit.every((a) => a.writing)
        ? "writing"
        : `NOT WRITING: ${audit.find((a) => !a.writing)?.error ?? ""}`;
  const marked = report.providers.flatMap((p) => p.credentials).filter((c) => c.state !== "ok").length;
  return html`<section class="facts-grid">
<div class="fact"><span class="k">Address</span><span class="v"><code>${report.url ?? "—"}</code></span></div>
<div class="fact"><span class="k">Up</span><span class="v">${formatUptime(report.uptimeSeconds ?? 0)}</span></div>
<div class="fact"><span class="k">Providers</span><span class="v">${report.providers.filter((p) => p.active).length} active · ${marked} need attention</span></div>
<div class="fact"><span class="k">Audit log</span><span class="v">${auditText}</span></div>
<div class="fact wide"><span class="k">CA fingerprint</span><span class="v"><code class="fp wrap">${report.ca?.fingerprint ?? "—"}</code></span></div>
<div class="fact wide"><span class="k">Rules</span><span class="v"><code class="wrap">${report.rules}</code> · version ${report.version}</span></div>
${sharedStateFact(report.state)}
</section>
${report.reload === undefined ? "" : html`<p class="flash error">Reload rejected ${relative(report.reload.rejectedAt)}: ${report.reload.message}</p>`}
${launchesFact(report)}
<h2>Providers</h2>
${report.providers.length === 0 ? html`<p class="empty card">No provider has a credential yet.</p>` : report.providers.map((p) => providerCard(p, f))}`;
}

/** `run --isolate` launches running now (decision 114): id, client, command, start. */
function launchesFact(report: StatusReport): Html | string {
  const launches = report.launches ?? [];
  if (launches.length === 0) return "";
  return html`<h2>Isolated launches</h2>
<ul class="card">${launches.map((l) => html`<li><code>${l.id}</code> · ${l.client} · <code class="wrap">${l.command}</code> · started ${relative(l.startedAt)}</li>`)}</ul>`;
}

export function approvalsPart(pending: readonly ApprovalView[], f: FormContext): Html {
  if (pending.length === 0) {
    return html`<p class="empty card">Nothing is waiting. Requests matched by an <code>approve</code> rule appear here until someone answers them.</p>`;
  }
  return html`<div class="stack">${pending.map(
    (a) => html`<article class="card approval" id="approval-${a.id}">
<header><span class="method">${a.method}</span><code class="path">${a.host}${a.path}</code></header>
<p class="meta"><strong>${a.client}</strong> → <strong>${a.provider}</strong> · id <code>${a.id}</code> · <span class="left" data-countdown="${a.seconds_left}">${a.seconds_left}s left</span></p>
${a.preview === "" ? html`<p class="empty">No body.</p>` : html`<pre class="preview">${a.preview}</pre>`}
<div class="buttons">
<form method="post" action="/admin/do/approve">${csrfField(f)}<input type="hidden" name="id" value="${a.id}">
<select name="for" aria-label="Approve for"><option value="">this request</option><option value="10m">and the same for 10 min</option><option value="1h">and the same for 1 h</option></select>
<button type="submit" class="primary">Approve</button></form>
<form method="post" action="/admin/do/deny">${csrfField(f)}<input type="hidden" name="id" value="${a.id}"><button type="submit" class="danger">Deny</button></form>
</div>
</article>`,
  )}</div>`;
}

function chainLine(c: ChainState): Html {
  const r = c.result;
  const name = c.chain === "audit" ? "Audit chain" : "Security chain";
  if (!r.ok)
    return html`<li><span class="badge bad">broken</span> ${name}: ${r.problem} (line ${r.line})</li>`;
  const gaps = r.gaps.reduce((n, g) => n + g.lost, 0);
  return html`<li><span class="badge ${gaps > 0 ? "warn" : "ok"}">${gaps > 0 ? "gaps" : "verified"}</span> ${name}: ${r.lines} lines in ${r.files.length} file(s)${gaps > 0 ? `, ${gaps} event(s) lost` : ""}${r.fromGenesis ? "" : ", oldest lines rotated away"}</li>`;
}

export function auditFrame(
  filter: AuditFilter,
  clients: readonly string[],
  providers: readonly string[],
): Html {
  const select = (name: string, label: string, options: readonly string[], value: string | undefined) =>
    html`<label>${label}<select name="${name}"><option value="">all</option>${options.map(
      (o) => html`<option${o === value ? html` selected` : ""}>${o}</option>`,
    )}</select></label>`;
  return html`<form class="filters card" method="get" action="/admin/audit" data-autosubmit>
${select("provider", "Provider", providers, filter.provider)}
${select("client", "Client", clients, filter.client)}
${select("decision", "Decision", AUDIT_DECISIONS, filter.decision)}
<button type="submit">Filter</button>
</form>`;
}

export function auditPart(lines: readonly AuditRecord[], chains: readonly ChainState[] | undefined): Html {
  const chainList =
    chains === undefined
      ? html`<p class="empty">The audit log is off in this rule file.</p>`
      : html`<ul class="chains">${chains.map(chainLine)}</ul>`;
  const rows = lines.map((r) => {
    const kind =
      r.decision === "blocked" || r.decision.endsWith("failed") || r.decision === "denied"
        ? "bad"
        : r.decision === "injected" || r.decision === "approved"
          ? "ok"
          : "muted";
    const request =
      r.method !== undefined || r.host !== undefined
        ? `${r.method ?? ""} ${r.host ?? ""}${r.path ?? ""}`
        : "";
    const why = [r.code, r.reason].filter((x) => x !== undefined && x !== "").join(": ");
    return html`<tr>
<td data-label="Time"><time datetime="${r.time}">${r.time.slice(11, 19)}</time></td>
<td data-label="Decision"><span class="badge ${kind}">${r.decision}</span></td>
<td data-label="Who">${r.client === undefined && r.provider === undefined ? "—" : `${r.client ?? "—"}${r.launch === undefined ? "" : ` (launch ${r.launch})`} → ${r.provider ?? "—"}`}</td>
<td data-label="Request" class="req"><code>${request}</code></td>
<td data-label="Status" class="num">${r.status ?? ""}</td>
<td data-label="Detail" class="why">${r.credential === undefined ? "" : html`<code>${r.credential}</code> `}${why}</td>
</tr>`;
  });
  return html`${chainList}
${lines.length === 0 ? html`<p class="empty card">No audit lines match.</p>` : html`<div class="card flush"><table class="audit"><thead><tr><th>Time (UTC)</th><th>Decision</th><th>Client → provider</th><th>Request</th><th class="num">Status</th><th>Detail</th></tr></thead><tbody>${rows}</tbody></table></div>`}`;
}

export function usagePart(rows: readonly UsageRow[]): Html {
  if (rows.length === 0) return html`<p class="empty card">No requests in the last 24 hours.</p>`;
  const total = rows.reduce(
    (t, r) => ({
      requests: t.requests + r.requests,
      errors: t.errors + r.errors,
      blocked: t.blocked + r.blocked,
      bytes: t.bytes + r.bytes,
    }),
    { requests: 0, errors: 0, blocked: 0, bytes: 0 },
  );
  const spark = (hourly: readonly number[]) => {
    const max = Math.max(1, ...hourly);
    return html`<span class="spark" aria-label="requests per hour, last 24 h">${hourly.map(
      (n) => html`<i class="h${n === 0 ? 0 : Math.max(1, Math.round((n / max) * 8))}" title="${n}"></i>`,
    )}</span>`;
  };
  return html`<section class="facts-grid">
<div class="fact"><span class="k">Requests</span><span class="v big">${total.requests}</span></div>
<div class="fact"><span class="k">Errors</span><span class="v big">${total.errors}</span></div>
<div class="fact"><span class="k">Blocked</span><span class="v big">${total.blocked}</span></div>
<div class="fact"><span class="k">Bytes</span><span class="v big">${formatBytes(total.bytes)}</span></div>
</section>
<div class="card flush"><table class="usage"><thead><tr><th>Client</th><th>Provider</th><th class="num">Requests</th><th class="num">Errors</th><th class="num">Blocked</th><th class="num">Bytes</th><th>Last 24 h</th></tr></thead><tbody>${rows.map(
    (r) => html`<tr>
<td data-label="Client">${r.client}</td><td data-label="Provider">${r.provider}</td>
<td data-label="Requests" class="num">${r.requests}</td><td data-label="Errors" class="num">${r.errors}</td>
<td data-label="Blocked" class="num">${r.blocked}</td><td data-label="Bytes" class="num">${formatBytes(r.bytes)}</td>
<td data-label="Last 24 h">${spark(r.hourly)}</td></tr>`,
  )}</tbody></table></div>`;
}

export interface ActionsData {
  readonly report: StatusReport;
  readonly oauthProviders: readonly string[];
}

export function actionsFrame(d: ActionsData, f: FormContext): Html {
  const marks = d.report.providers.flatMap((p) =>
    p.credentials.filter((c) => c.state !== "ok" && c.state !== "missing").map((c) => ({ p: p.id, c: c.id })),
  );
  const logins = d.report.providers.flatMap((p) =>
    p.credentials.filter((c) => c.source === "oauth").map((c) => `${p.id}/${c.id}`),
  );
  const owner = f.role === "owner";
  const ownerOnly = html`<p class="hint">Only an owner may do this.</p>`;
  return html`<section class="actions">
<article class="card">
<h2>Reset a mark</h2>
<p class="hint">Clears a rate-limit or invalid mark, so the credential is tried again.</p>
<form method="post" action="/admin/do/reset" class="row">${csrfField(f)}<input type="hidden" name="back" value="actions">
<select name="target" aria-label="Credential" required>${
    marks.length === 0
      ? html`<option value="">no marked credential</option>`
      : marks.map((m) => html`<option value="${m.p}/${m.c}">${m.p} / ${m.c}</option>`)
  }</select>
<button type="submit"${marks.length === 0 ? html` disabled` : ""}>Reset</button></form>
</article>
<article class="card">
<h2>Log in with OAuth</h2>
<p class="hint">Starts a device-flow login: open the address shown and enter the code.</p>
${
  !owner
    ? ownerOnly
    : d.oauthProviders.length === 0
      ? html`<p class="empty">No provider in the rules uses OAuth.</p>`
      : html`<form method="post" action="/admin/do/device-login" class="row">${csrfField(f)}
<select name="provider" aria-label="Provider">${d.oauthProviders.map((p) => html`<option>${p}</option>`)}</select>
<input name="label" value="default" aria-label="Label" pattern="[A-Za-z0-9][A-Za-z0-9._\\-]{0,63}" required>
<button type="submit" class="primary">Start login</button></form>`
}
</article>
<article class="card">
<h2>Remove a login</h2>
<p class="hint">Deletes an OAuth login, revoking it where the provider allows.</p>
${
  !owner
    ? ownerOnly
    : html`<form method="post" action="/admin/do/remove-login" class="row">${csrfField(f)}
<select name="target" aria-label="Login" required>${
        logins.length === 0
          ? html`<option value="">no OAuth login</option>`
          : logins.map((l) => html`<option>${l}</option>`)
      }</select>
<button type="submit" class="danger"${logins.length === 0 ? html` disabled` : ""}>Remove</button></form>`
}
</article>
<article class="card">
<h2>Reload the rules</h2>
<p class="hint">Reads <code class="wrap">${d.report.rules}</code> again, as SIGHUP does; an invalid file is rejected and the current rules stay.</p>
${owner ? html`<form method="post" action="/admin/do/reload">${csrfField(f)}<button type="submit">Reload</button></form>` : ownerOnly}
</article>
</section>`;
}

export function actionsPart(logins: readonly DeviceLoginState[]): Html {
  if (logins.length === 0) return html``;
  return html`<h2>OAuth logins started here</h2><div class="stack">${logins.map(
    (l) => html`<article class="card device">
<header><h3>${l.provider} / ${l.label}</h3>${
      l.status === "waiting"
        ? html`<span class="badge warn">waiting</span>`
        : l.status === "done"
          ? html`<span class="badge ok">done</span>`
          : l.status === "failed"
            ? html`<span class="badge bad">failed</span>`
            : html`<span class="badge muted">starting</span>`
    }</header>
${
  l.status === "waiting" && l.url !== undefined
    ? html`${
        // The server's address is a link only when https (decision 100); else text to check.
        isLinkableUrl(l.url)
          ? html`<p>Open <a href="${l.url}" target="_blank" rel="noopener noreferrer">${l.url}</a> and enter</p>`
          : html`<p>Open <code class="wrap">${l.url}</code> and enter</p><p class="hint">The authorization server gave an address that is not https: check it before you open it.</p>`
      }<p class="code">${l.code ?? ""}</p>`
    : ""
}
${l.message === undefined ? "" : html`<p class="hint">${l.message}</p>`}
</article>`,
  )}</div>`;
}
