// A device login's verification address comes from the authorization server (decision 100): only
// https, or http to this machine, becomes a link on the admin page; anything else is text, and a
// terminal never receives its control characters.
import { describe, expect, it } from "vitest";
import { actionsPart } from "../../../../admin/views.js";
import { isLinkableUrl, printable } from "../../../../secrets/oauth/verification-url.js";

const waiting = (url: string) =>
  actionsPart([{ provider: "codex-oauth", label: "x", startedAt: 0, status: "waiting", url, code: "AB-CD" }])
    .text;

describe("verification addresses", () => {
  it("are links only when https, or http on a loopback host", () => {
    for (const ok of [
      "https://auth.example.com/activate?user_code=AB",
      "http://127.0.0.1:8080/device",
      "http://localhost/device",
      "http://[::1]:9000/device",
    ]) {
      expect(isLinkableUrl(ok), ok).toBe(true);
      expect(waiting(ok), ok).toContain(`<a href="${ok.replace(/&/g, "&amp;")}"`);
    }
    for (const bad of [
      "javascript:alert(document.cookie)",
      "JavaScript:alert(1)",
      "data:text/html,<script>alert(1)</script>",
      "http://auth.example.com/activate",
      "file:///etc/passwd",
      "//auth.example.com/activate",
      "not a url",
    ]) {
      expect(isLinkableUrl(bad), bad).toBe(false);
      const part = waiting(bad);
      expect(part, bad).not.toContain("<a ");
      expect(part, bad).not.toContain("href");
      expect(part, bad).toContain("not https: check it before you open it");
      expect(part, bad).toContain("AB-CD");
    }
  });

  it("print without control characters", () => {
    expect(printable("https://a.example/\u001b]8;;javascript:x\u0007\nfake line\u2028")).toBe(
      "https://a.example/\\u001b]8;;javascript:x\\u0007\\u000afake line\\u2028",
    );
    expect(printable("https://auth.example.com/activate?user_code=WDJB-MJHT")).toBe(
      "https://auth.example.com/activate?user_code=WDJB-MJHT",
    );
  });
});
