// keybroker admin page: loads each view with the session's page secret (kept in this origin's
// storage, sent as a header: the cookie alone gets nothing, decision 104), sends the forms that
// change something the same way, keeps each view's live part current (short polling of the
// server's own rendering), counts down approval deadlines, and submits the audit filters as they
// change. Served as a file under a strict Content-Security-Policy; no inline script anywhere.
"use strict";
(() => {
  const POLL_MS = 2500;
  const KEY = "kb_admin";
  const HEADER = "x-keybroker-session";
  let lastUpdate = Date.now();

  function secret() {
    try {
      return window.localStorage.getItem(KEY);
    } catch {
      return null;
    }
  }

  function toLogin() {
    try {
      window.localStorage.removeItem(KEY);
    } catch {}
    window.location.replace("/admin/login");
  }

  /** A request with the page secret; undefined when the session is gone (the login page is opened). */
  async function call(url, init = {}) {
    const s = secret();
    if (!s) {
      toLogin();
      return undefined;
    }
    const headers = new Headers(init.headers);
    headers.set(HEADER, s);
    const res = await fetch(url, { ...init, headers, credentials: "same-origin", cache: "no-store" });
    if (res.status === 401 || new URL(res.url).pathname === "/admin/login") {
      toLogin();
      return undefined;
    }
    return res;
  }

  /** Shows a page the server rendered in place of this one. */
  function show(text) {
    const doc = new DOMParser().parseFromString(text, "text/html");
    document.title = doc.title;
    document.body.className = doc.body.className;
    // A copy of the list first: adopting a node takes it out of the live one.
    const nodes = Array.from(doc.body.childNodes);
    document.body.replaceChildren(...nodes.map((n) => document.adoptNode(n)));
    ready();
  }

  async function load(url) {
    let res;
    try {
      res = await call(url);
    } catch {
      document.querySelector("[data-load] .hint")?.replaceChildren("The broker did not answer: reload to try again.");
      return;
    }
    if (res) show(await res.text());
  }

  async function send(form) {
    const body = new URLSearchParams(new FormData(form));
    let res;
    try {
      res = await call(form.action, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body,
      });
    } catch {
      return;
    }
    if (!res) return;
    const text = await res.text();
    // Where the change led (a view with its outcome) becomes this page's address.
    if (res.redirected && res.url !== window.location.href) window.history.pushState(null, "", res.url);
    show(text);
  }

  function stamp() {
    const el = document.querySelector("[data-updated]");
    if (!el) return;
    const s = Math.round((Date.now() - lastUpdate) / 1000);
    el.textContent = s < 2 ? "updated now" : `updated ${s}s ago`;
  }

  async function refresh(region) {
    const url = region.getAttribute("data-live");
    if (!url) return;
    let res;
    try {
      res = await call(url);
    } catch {
      return; // the broker is restarting, or the network went away: try again next time
    }
    if (!res?.ok) return;
    const text = await res.text();
    // Never pull the ground from under someone using a control inside the region.
    if (region.contains(document.activeElement) && document.activeElement !== document.body) return;
    if (region.getAttribute("data-last") !== text) {
      region.innerHTML = text;
      region.setAttribute("data-last", text);
      countdowns();
    }
    lastUpdate = Date.now();
  }

  function poll() {
    if (document.hidden) return;
    for (const region of document.querySelectorAll("[data-live]")) refresh(region);
  }

  function countdowns() {
    for (const el of document.querySelectorAll("[data-countdown]")) {
      if (!el.dataset.deadline) el.dataset.deadline = String(Date.now() + Number(el.dataset.countdown) * 1000);
    }
  }

  function tick() {
    for (const el of document.querySelectorAll("[data-deadline]")) {
      const left = Math.max(0, Math.round((Number(el.dataset.deadline) - Date.now()) / 1000));
      el.textContent = left > 0 ? `${left}s left` : "timed out";
      el.classList.toggle("soon", left <= 15);
    }
    stamp();
  }

  /** What a page needs once it is shown: live parts, countdowns, filters that submit themselves. */
  function ready() {
    for (const region of document.querySelectorAll("[data-live]")) {
      region.setAttribute("data-last", region.innerHTML);
    }
    lastUpdate = Date.now();
    countdowns();
    for (const form of document.querySelectorAll("form[data-autosubmit]")) {
      for (const select of form.querySelectorAll("select")) {
        select.addEventListener("change", () => form.submit());
      }
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    // The login's answer: keep the page secret for this origin only, then open the page.
    const login = document.querySelector("[data-session]");
    if (login) {
      try {
        window.localStorage.setItem(KEY, login.getAttribute("data-session"));
      } catch {
        login.querySelector(".hint")?.replaceChildren("This browser keeps no storage for the page: allow it.");
        return;
      }
      window.location.replace(login.getAttribute("data-next") || "/admin/");
      return;
    }
    if (document.querySelector("[data-load]")) load(window.location.href);
    else ready();
    // Changes carry the page secret too; the login form is an ordinary form (no session yet).
    document.addEventListener("submit", (event) => {
      const form = event.target;
      if (!(form instanceof HTMLFormElement) || form.method !== "post") return;
      if (new URL(form.action).pathname === "/admin/login") return;
      event.preventDefault();
      send(form);
    });
    window.addEventListener("popstate", () => load(window.location.href));
    setInterval(poll, POLL_MS);
    setInterval(tick, 1000);
    document.addEventListener("visibilitychange", poll);
  });
})();
