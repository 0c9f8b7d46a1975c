// Phantom tokens (decision 162): recognised by their signature alone, bound to one login and
// use; a changed or foreign one is nothing; a JWT's keeps its claims and is re-signed.
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { jwtPayload, Phantoms } from "../../../../secrets/oauth/phantoms.js";

const jwt = (header: object, payload: object) =>
  `${Buffer.from(JSON.stringify(header)).toString("base64url")}.${Buffer.from(JSON.stringify(payload)).toString("base64url")}.${randomBytes(64).toString("base64url")}`;

describe("phantoms", () => {
  const home = randomBytes(32);
  const p = new Phantoms(home);
  const b = { provider: "codex-oauth", id: "default", kind: "access" } as const;

  it("a JWT's phantom keeps header claims and payload, and is signed by keybroker", () => {
    const real = jwt(
      { alg: "RS256", typ: "JWT", kid: "k1" },
      { exp: 1_900_000_000, "https://api.openai.com/auth": { chatgpt_account_id: "a" } },
    );
    const ph = p.make(real, b);
    expect(ph).not.toBe(real);
    expect(jwtPayload(ph)).toEqual(jwtPayload(real));
    expect(JSON.parse(Buffer.from(ph.split(".")[0]!, "base64url").toString())).toEqual({
      kbl: "codex-oauth/default/access",
      alg: "HS256",
      typ: "JWT",
      kid: "k1",
    });
    expect(p.read(ph)).toEqual(b);
    expect(p.make(real, b)).toBe(ph);
  });

  it("an opaque token's phantom keeps its well-known prefix; the same token gets the same phantom", () => {
    const ph = p.make("sk-ant-oat01-realrealreal", { ...b, provider: "claude-oauth" });
    expect(ph).toMatch(/^sk-ant-oat01-kbph_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$/);
    expect(p.read(ph)).toEqual({ ...b, provider: "claude-oauth" });
    expect(p.find(`Bearer ${ph}`)).toEqual([{ token: ph, binding: { ...b, provider: "claude-oauth" } }]);
  });

  it("mayHold skips only texts too short for any phantom's shape", () => {
    // The shortest text of a phantom's shape (decision 190): `kbph_`, 4 characters, a dot, 22.
    const shortest = `kbph_abcd.${"m".repeat(22)}`;
    expect(p.find(shortest)).toEqual([]); // shaped like one, signed by no one
    expect(Phantoms.mayHold(shortest)).toBe(true);
    expect(Phantoms.mayHold(shortest.slice(1))).toBe(false);
    expect(Phantoms.mayHold(`Bearer ${p.make("x", b)}`)).toBe(true);
    const real = jwt({ alg: "RS256" }, { exp: 1 });
    expect(Phantoms.mayHold(p.make(real, b))).toBe(true);
    for (const token of ["ya29.realtoken", "1//refresh", "sk-ant-oat01-realrealreal"]) {
      expect(Phantoms.mayHold(p.make(token, b))).toBe(true);
    }
  });

  it("a tampered, truncated or other home's phantom is not one", () => {
    const opaque = p.make("ya29.real", { ...b, provider: "gemini-oauth" });
    const token = p.make(jwt({ alg: "RS256" }, { exp: 1 }), b);
    const other = new Phantoms(randomBytes(32));
    for (const ph of [opaque, token]) {
      expect(other.read(ph)).toBeUndefined();
      expect(p.read(ph.slice(0, -1))).toBeUndefined();
      expect(p.read(`${ph.slice(0, -2)}${ph.endsWith("AA") ? "AB" : "AA"}`)).toBeUndefined();
    }
    // A payload changed under a kept signature (a forged exp or account) is not one either.
    const [h, , s] = token.split(".");
    expect(p.read(`${h}.${Buffer.from('{"exp":2}').toString("base64url")}.${s}`)).toBeUndefined();
    expect(p.read("kbph_bm9uc2Vuc2U.AAAAAAAAAAAAAAAAAAAAAA")).toBeUndefined();
  });

  it("is one exact string: its MAC spelled with other spare bits in its last character is not one", () => {
    const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const opaque = p.make("ya29.real", { ...b, provider: "gemini-oauth" });
    const token = p.make(jwt({ alg: "RS256" }, { exp: 1 }), b);
    for (const ph of [opaque, token]) {
      // The lowest bit of the last character is a spare one for a 16-byte and a 32-byte MAC:
      // the changed text decodes to the very same bytes.
      const last = B64URL.indexOf(ph.at(-1)!);
      const respelled = `${ph.slice(0, -1)}${B64URL[last ^ 1]}`;
      const mac = ph.slice(ph.lastIndexOf(".") + 1);
      expect(Buffer.from(respelled.slice(ph.lastIndexOf(".") + 1), "base64url")).toEqual(
        Buffer.from(mac, "base64url"),
      );
      expect(p.read(ph)).toBeDefined();
      expect(p.read(respelled)).toBeUndefined();
      expect(p.find(`Bearer ${respelled}`)).toEqual([]);
    }
  });
});
