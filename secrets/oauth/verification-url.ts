// The verification address of a device login comes from the authorization server, which may be
// hostile (decision 100): only an https address (or http to this machine) is handed on as a
// link, and what a terminal prints of it cannot carry control sequences.
import { isLoopbackHost } from "../../rules/address.js";

/** Whether the address may be a link: https, or http to a loopback host. */
export function isLinkableUrl(text: string): boolean {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return false;
  }
  if (url.protocol === "https:") return true;
  return url.protocol === "http:" && isLoopbackHost(url.hostname.replace(/^\[|\]$/g, ""));
}

/** The text with control characters (escape sequences, line breaks) shown as \uXXXX. */
export function printable(text: string): string {
  return text.replace(
    /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
