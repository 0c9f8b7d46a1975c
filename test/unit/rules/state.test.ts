// `state:` in the rule file (docs/spec.md §17): a redis:// or rediss:// URL, or { url, password, prefix },
// checked at load with errors that name the path; a password never sits in the URL.
import { describe, expect, it } from "vitest";
import { parseSnippet, snippetProblems } from "../../helpers/rules.js";

const parse = parseSnippet;
const problems = snippetProblems;

describe("state:", () => {
  it("defaults to the home, and reads a URL or a map", () => {
    expect(parse("").state).toBeUndefined();
    expect(parse("state: redis://10.0.0.5:6379/2\n").state).toEqual({
      kind: "redis",
      url: "redis://10.0.0.5:6379/2",
      prefix: "keybroker:",
    });
    expect(
      parse(
        'state: { url: "rediss://cache.internal:6380", password: env:REDIS_PASSWORD, prefix: "team-a:" }\n',
      ).state,
    ).toEqual({
      kind: "redis",
      url: "rediss://cache.internal:6380",
      password: "env:REDIS_PASSWORD",
      prefix: "team-a:",
    });
    // A file reference is made absolute against the rule file's folder.
    expect(parse("state: { url: redis://h:6379, password: file:./redis.pw }\n").state?.password).toBe(
      "file:/etc/kb/redis.pw",
    );
  });

  it("trusts upstream_ca for a rediss:// server, as for any upstream; a plain redis:// has no roots", () => {
    expect(parse("upstream_ca: [./redis-ca.pem]\nstate: rediss://cache.internal:6380/0\n").state).toEqual({
      kind: "redis",
      url: "rediss://cache.internal:6380/0",
      prefix: "keybroker:",
      ca: ["/etc/kb/redis-ca.pem"],
    });
    expect(
      parse("upstream_ca: [./redis-ca.pem]\nstate: { url: redis://cache:6379 }\n").state?.ca,
    ).toBeUndefined();
    expect(problems("state: { url: rediss://cache:6380, ca: ./redis-ca.pem }\n")).toEqual([
      'state: unknown key "ca" — a rediss:// server is verified with the system\'s roots plus the files in upstream_ca: list its CA there',
    ]);
  });

  it("names the path and the fix for each mistake, never echoing a password", () => {
    expect(problems("state: http://cache:6379\n")).toEqual([
      'state: must be a redis:// or rediss:// URL, as in "redis://127.0.0.1:6379/0"',
    ]);
    const withPassword = problems("state: redis://:hunter2-secret@cache:6379\n");
    expect(withPassword).toEqual([
      "state: must not carry a password — write state: { url, password: <credential reference> }",
    ]);
    expect(withPassword.join()).not.toContain("hunter2");
    expect(problems("state: { url: redis://cache:6379, passwrd: env:X }\n")).toEqual([
      'state: unknown key "passwrd" — did you mean "password"?',
    ]);
    expect(problems('state: { url: redis://cache:6379, prefix: "has space" }\n')).toEqual([
      'state.prefix: a prefix is up to 64 letters, digits, ":", ".", "_" or "-", as in "keybroker:"',
    ]);
    expect(problems("state: { url: redis://cache:6379, password: 'not a ref!' }\n")[0]).toMatch(
      /^state\.password: /,
    );
    expect(problems("state: { password: env:X }\n")).toEqual([
      "state.url: required key is missing (expected a redis:// or rediss:// URL)",
    ]);
    expect(problems("state: redis://cache:6379/db\n")).toEqual([
      'state: the path is a database number, as in "/0"',
    ]);
  });
});
