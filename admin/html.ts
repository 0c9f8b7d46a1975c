// HTML for the admin page: a tagged template that escapes every value it is given, so no
// caller can forget to. Markup made by `html` (or marked with `raw` on purpose) passes as is.
import { knownSecrets } from "../core/scrub.js";

export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

type Value = Html | string | number | boolean | undefined | null | readonly Value[];

/** Escapes for text and quoted attribute values; known secret values are masked first. */
export function esc(value: string): string {
  return knownSecrets
    .scrub(value)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function render(value: Value): string {
  if (value === undefined || value === null || value === false) return "";
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join("");
  return esc(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return new Html(out);
}

/** "3 KiB", "1.2 MiB". */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = -1;
  do {
    v /= 1024;
    u++;
  } while (v >= 1024 && u < units.length - 1);
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[u]}`;
}

/** "in 4m 10s" / "5m ago" from an ISO time, relative to now. */
export function relative(iso: string | undefined, now = Date.now()): string | undefined {
  if (iso === undefined) return undefined;
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((t - now) / 1000);
  const span = (x: number) =>
    x >= 86_400
      ? `${Math.floor(x / 86_400)}d ${Math.floor((x % 86_400) / 3600)}h`
      : x >= 3600
        ? `${Math.floor(x / 3600)}h ${Math.floor((x % 3600) / 60)}m`
        : x >= 60
          ? `${Math.floor(x / 60)}m ${x % 60}s`
          : `${x}s`;
  return s >= 0 ? `in ${span(s)}` : `${span(-s)} ago`;
}
