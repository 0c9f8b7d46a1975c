import { describe, expect, it } from "vitest";
import { stripSecrets } from "../../../cli/strip-secrets.js";

const KEY = 'sk-real+key/with"odd&chars=1234';

describe("stripSecrets", () => {
  it("removes the named variables silently and copies of a secret in every form by name", () => {
    const env: NodeJS.ProcessEnv = {
      OPENAI_API_KEY: KEY,
      PLAIN: `x ${KEY} y`,
      URL: `https://h/?k=${encodeURIComponent(KEY)}`,
      FORM: `k=${encodeURIComponent(`${KEY} more`).replace(/%20/g, "+")}`,
      JSON: JSON.stringify({ k: KEY }),
      B64: Buffer.from(KEY).toString("base64"),
      B64_SHIFTED: Buffer.from(`u:${KEY}`).toString("base64"),
      PATH: "/usr/bin:/bin",
    };
    const removed = stripSecrets(env, ["OPENAI_API_KEY"], []);
    expect(removed).toEqual(["B64", "B64_SHIFTED", "FORM", "JSON", "PLAIN", "URL"]);
    expect(env).toEqual({ PATH: "/usr/bin:/bin" });
  });

  it("looks for resolved secrets that no variable is named after", () => {
    const env: NodeJS.ProcessEnv = { COPY: `Bearer ${KEY}`, OTHER: "fine" };
    expect(stripSecrets(env, [], [KEY])).toEqual(["COPY"]);
    expect(env).toEqual({ OTHER: "fine" });
  });

  it("does not search for values too short to tell from ordinary text", () => {
    const env: NodeJS.ProcessEnv = { SHORT: "abc1", HOME: "/home/abc1" };
    expect(stripSecrets(env, ["SHORT"], ["bin"])).toEqual([]);
    expect(env).toEqual({ HOME: "/home/abc1" });
  });
});
