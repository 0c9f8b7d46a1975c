import { describe, expect, it } from "vitest";
import { hostPortKey, isLoopbackHost, parseHostPort } from "../../../rules/address.js";
import { hostMatches, normalizeHost, parseHostPattern } from "../../../rules/host-pattern.js";

describe("normalizeHost", () => {
  it.each([
    ["API.OpenAI.com", "api.openai.com"],
    ["api.openai.com.", "api.openai.com"],
    ["Bücher.example", "xn--bcher-kva.example"],
    ["xn--bcher-kva.example", "xn--bcher-kva.example"],
    ["127.0.0.1", "127.0.0.1"],
    ["[::1]", "::1"],
    ["::1", "::1"],
    ["[0:0:0:0:0:0:0:1]", "::1"],
    ["[2001:DB8::1]", "2001:db8::1"],
    ["my_host.internal", "my_host.internal"],
  ])("%s → %s", (input, expected) => {
    expect(normalizeHost(input)).toBe(expected);
  });

  it.each([
    "",
    ".",
    "a..b",
    "exa mple.com",
    "exa%mple.com",
    "api.openai.com:443",
    "[::1",
    "[nope]",
    "*.example.com",
    "a.b.c.256",
  ])("rejects %j", (input) => {
    expect(() => normalizeHost(input)).toThrow();
  });
});

describe("parseHostPattern", () => {
  it("parses an exact host with the default port 443", () => {
    expect(parseHostPattern("API.OpenAI.com")).toEqual({
      source: "API.OpenAI.com",
      host: "api.openai.com",
      wildcard: false,
      port: 443,
    });
  });

  it("parses host:port, wildcards and IPv6 literals", () => {
    expect(parseHostPattern("api.openai.com:8443")).toMatchObject({ host: "api.openai.com", port: 8443 });
    expect(parseHostPattern("*.openai.azure.com")).toMatchObject({
      host: "openai.azure.com",
      wildcard: true,
      port: 443,
    });
    expect(parseHostPattern("*.example.com:8443")).toMatchObject({
      host: "example.com",
      wildcard: true,
      port: 8443,
    });
    expect(parseHostPattern("[::1]:9443")).toMatchObject({ host: "::1", wildcard: false, port: 9443 });
    expect(parseHostPattern("::1")).toMatchObject({ host: "::1", port: 443 });
    expect(parseHostPattern("*.Bücher.example")).toMatchObject({
      host: "xn--bcher-kva.example",
      wildcard: true,
    });
    expect(parseHostPattern("api.openai.com.")).toMatchObject({ host: "api.openai.com" });
  });

  it.each([
    ["api.openai.*", "a wildcard must be the whole first label"],
    ["*openai.com", "a wildcard must be the whole first label"],
    ["api.*.com", "a wildcard must be the whole first label"],
    ["*.*.example.com", "a wildcard must be the whole first label"],
    ["a*.example.com", "a wildcard must be the whole first label"],
    ["*.com", "at least two labels"],
    ["*.com:8443", "at least two labels"],
    ["*", "a bare *"],
    ["*:443", "a bare *"],
    ["**", "** is glob syntax"],
    ["**.example.com", "** is glob syntax"],
    ["!api.openai.com", "glob syntax"],
    ["{a,b}.example.com", "glob syntax"],
    ["[ab].example.com", "glob syntax"],
    ["[ab]", "glob syntax"],
    ["api.openai.co?", "glob syntax"],
    ["api..openai.com", "empty label"],
    [".openai.com", "empty label"],
    ["*..com", "empty label"],
    ["", "empty"],
    ["api.openai.com:", "port"],
    ["api.openai.com:0", "out of range"],
    ["api.openai.com:70000", "out of range"],
    ["api.openai.com:https", "port"],
    ["https://api.openai.com", "without a scheme"],
    ["api.openai.com/v1", "no path"],
    ["api openai.com", "whitespace"],
    ["*.127.0.0.1", "IP address"],
    ["example.com:1:443", "brackets"],
  ])("rejects %j (%s)", (source, why) => {
    expect(() => parseHostPattern(source)).toThrow(why);
    expect(() => parseHostPattern(source)).toThrow('— use an exact host or "*.example.com"');
  });

  it("quotes the pattern in its message", () => {
    expect(() => parseHostPattern("api.openai.*")).toThrow(/^"api\.openai\.\*" is not a valid host pattern/);
  });
});

describe("hostMatches", () => {
  const exact = parseHostPattern("api.openai.com");
  const wildcard = parseHostPattern("*.openai.azure.com");

  it("matches an exact host whatever its case, trailing dot or IDN form", () => {
    expect(hostMatches(exact, "api.openai.com", 443)).toBe(true);
    expect(hostMatches(exact, "API.OPENAI.COM", 443)).toBe(true);
    expect(hostMatches(exact, "api.openai.com.", 443)).toBe(true);
    const idn = parseHostPattern("bücher.example");
    expect(hostMatches(idn, "xn--bcher-kva.example", 443)).toBe(true);
    expect(hostMatches(idn, "BÜCHER.example.", 443)).toBe(true);
  });

  it("compares ports separately", () => {
    expect(hostMatches(exact, "api.openai.com", 8443)).toBe(false);
    expect(hostMatches(parseHostPattern("api.openai.com:8443"), "api.openai.com", 8443)).toBe(true);
    expect(hostMatches(parseHostPattern("api.openai.com:8443"), "api.openai.com", 443)).toBe(false);
  });

  it("does not match look-alikes of an exact host", () => {
    expect(hostMatches(exact, "api.openai.com.evil.example", 443)).toBe(false);
    expect(hostMatches(exact, "evilapi.openai.com", 443)).toBe(false);
    expect(hostMatches(exact, "x.api.openai.com", 443)).toBe(false);
  });

  it("matches one or more labels in front of a wildcard's suffix, never the apex", () => {
    expect(hostMatches(wildcard, "myres.openai.azure.com", 443)).toBe(true);
    expect(hostMatches(wildcard, "a.b.openai.azure.com", 443)).toBe(true);
    expect(hostMatches(wildcard, "MyRes.OpenAI.Azure.com.", 443)).toBe(true);
    expect(hostMatches(wildcard, "openai.azure.com", 443)).toBe(false);
    expect(hostMatches(wildcard, "openai.azure.com.", 443)).toBe(false);
    expect(hostMatches(wildcard, "evilopenai.azure.com", 443)).toBe(false);
    expect(hostMatches(wildcard, "myres.openai.azure.com.evil.example", 443)).toBe(false);
    expect(hostMatches(wildcard, "myres.openai.azure.com", 8443)).toBe(false);
  });

  it("never matches an invalid host", () => {
    expect(hostMatches(exact, "", 443)).toBe(false);
    expect(hostMatches(exact, "api.openai.com:443", 443)).toBe(false);
    expect(hostMatches(wildcard, "*.openai.azure.com", 443)).toBe(false);
  });

  it("matches IPv6 literals with or without brackets", () => {
    const v6 = parseHostPattern("[::1]:9443");
    expect(hostMatches(v6, "[::1]", 9443)).toBe(true);
    expect(hostMatches(v6, "0:0::1", 9443)).toBe(true);
  });
});

describe("addresses", () => {
  it("parses host:port and bracketed IPv6", () => {
    expect(parseHostPort("LocalHost:8899")).toEqual({ host: "localhost", port: 8899 });
    expect(parseHostPort("[::1]:8899")).toEqual({ host: "::1", port: 8899 });
    expect(parseHostPort("example.com", { defaultPort: 443 })).toEqual({ host: "example.com", port: 443 });
    expect(parseHostPort("127.0.0.1:0", { allowPortZero: true })).toEqual({ host: "127.0.0.1", port: 0 });
    expect(() => parseHostPort("example.com")).toThrow("the port is missing");
    expect(() => parseHostPort("127.0.0.1:0")).toThrow("out of range");
    expect(() => parseHostPort("::1:8899")).toThrow("brackets");
  });

  it("writes keys with IPv6 in brackets", () => {
    expect(hostPortKey("api.openai.com", 443)).toBe("api.openai.com:443");
    expect(hostPortKey("::1", 443)).toBe("[::1]:443");
  });

  it.each([
    ["127.0.0.1", true],
    ["127.1.2.3", true],
    ["::1", true],
    ["localhost", true],
    ["::ffff:7f00:1", true],
    ["0.0.0.0", false],
    ["::", false],
    ["192.168.1.10", false],
    ["example.com", false],
  ])("isLoopbackHost(%s) = %s", (host, loopback) => {
    expect(isLoopbackHost(host)).toBe(loopback);
  });
});
