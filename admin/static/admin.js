// keybroker admin page: keeps each view's live part current (short polling of the server's own
// rendering), counts down approval deadlines, and submits the audit filters as they change.
// Served as a file under a strict Content-Security-Policy; no inline script anywhere.
"use strict";
(() => {
  const POLL_MS = 2500;
  let lastUpdate = Date.now();

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
      res = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    } catch {
      return; // the broker is restarting, or the network went away: try again next time
    }
    if (res.status === 401) {
      window.location.assign("/admin/login");
      return;
    }
    if (!res.ok) return;
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

  document.addEventListener("DOMContentLoaded", () => {
    for (const region of document.querySelectorAll("[data-live]")) {
      region.setAttribute("data-last", region.innerHTML);
    }
    countdowns();
    setInterval(poll, POLL_MS);
    setInterval(tick, 1000);
    document.addEventListener("visibilitychange", poll);
    for (const form of document.querySelectorAll("form[data-autosubmit]")) {
      for (const select of form.querySelectorAll("select")) {
        select.addEventListener("change", () => form.submit());
      }
    }
  });
})();
