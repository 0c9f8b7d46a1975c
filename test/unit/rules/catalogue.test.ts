import { describe, expect, it } from "vitest";
import { CATALOGUE, CATALOGUE_ORIGIN } from "../../../rules/catalogue.js";
import { hostMatches } from "../../../rules/host-pattern.js";
import { loadRules, parseRules } from "../../../rules/load.js";
import { providerSchema } from "../../../rules/schema/index.js";
import type { ProviderRule } from "../../../rules/types.js";

const SPEC_PROVIDERS = [
  "openai",
  "anthropic",
  "openrouter",
  "gemini",
  "groq",
  "mistral",
  "deepseek",
  "xai",
  "together",
  "fireworks",
  "perplexity",
  "huggingface",
  "azure-openai",
  "nous",
];

describe("embedded default catalogue", () => {
  const rules = loadRules(undefined);
  const byId = new Map(rules.providers.map((p) => [p.id, p]));
  const get = (id: string): ProviderRule => {
    const found = byId.get(id);
    if (!found) throw new Error(`no provider ${id}`);
    return found;
  };

  it("has every provider docs/spec.md §6 names", () => {
    expect(rules.origin).toBe(CATALOGUE_ORIGIN);
    for (const id of SPEC_PROVIDERS) expect(byId.has(id), id).toBe(true);
    expect(rules.providers.every((p) => p.fromCatalogue)).toBe(true);
  });

  it.each(Object.entries(CATALOGUE))("entry %s is a valid rule-file provider", (id, entry) => {
    const result = providerSchema.safeParse(entry);
    expect(result.success, JSON.stringify(result.error?.issues)).toBe(true);
    // And compiles alone, without the rest of the catalogue.
    const alone = parseRules(`version: 1\ncatalogue: false\nproviders:\n  ${id}: {}\n`, "t", "/");
    expect(alone.providers.map((p) => p.id)).toEqual([id]);
  });

  it("serves each API provider at /p/<id> with an https upstream", () => {
    for (const provider of rules.providers) {
      if (provider.id === "azure-openai") continue;
      expect(provider.mount).toBe(`/p/${provider.id}`);
      expect(provider.upstream).toMatch(/^https:\/\/[a-z0-9.-]+(\/[a-z0-9._-]+)*$/);
    }
  });

  it("injects and names variables as the providers' SDKs expect", () => {
    expect(get("openai")).toMatchObject({
      hosts: [{ host: "api.openai.com" }],
      inject: { headers: ["authorization"], format: "Bearer {secret}" },
      credentials: ["OPENAI_API_KEY"],
      credentialAliases: ["CODEX_API_KEY"],
      placeholder: { env: ["OPENAI_API_KEY", "CODEX_API_KEY"], prefix: "sk-kb-" },
    });
    expect(get("anthropic")).toMatchObject({
      hosts: [{ host: "api.anthropic.com" }],
      inject: { headers: ["x-api-key", "authorization"] },
      credentials: ["ANTHROPIC_API_KEY"],
      placeholder: { env: ["ANTHROPIC_API_KEY"], prefix: "sk-ant-kb-" },
    });
    expect(get("gemini")).toMatchObject({
      hosts: [{ host: "generativelanguage.googleapis.com" }],
      inject: { headers: ["x-goog-api-key"], query: "key", format: "{secret}" },
      credentials: ["GEMINI_API_KEY"],
      credentialAliases: ["GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"],
      placeholder: { env: ["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"] },
    });
    expect(get("azure-openai")).toMatchObject({
      hosts: [{ host: "openai.azure.com", wildcard: true }],
      inject: { headers: ["api-key"], format: "{secret}" },
      credentials: ["AZURE_OPENAI_API_KEY"],
      credentialAliases: ["AZURE_API_KEY"],
    });
    expect(get("huggingface").credentials).toEqual(["HF_TOKEN"]);
    expect(get("huggingface").credentialAliases).toEqual(["HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_API_KEY"]);
    expect(get("together").credentialAliases).toEqual(["TOGETHERAI_API_KEY", "TOGETHER_AI_API_KEY"]);
    expect(get("together").hosts.map((h) => h.host)).toEqual(["api.together.xyz", "api.together.ai"]);
    const variables: Record<string, string> = {
      openrouter: "OPENROUTER_API_KEY",
      groq: "GROQ_API_KEY",
      mistral: "MISTRAL_API_KEY",
      deepseek: "DEEPSEEK_API_KEY",
      xai: "XAI_API_KEY",
      nous: "NOUS_API_KEY",
    };
    for (const [id, variable] of Object.entries(variables)) {
      expect(get(id).credentials).toEqual([variable]);
      expect(get(id).placeholder).toEqual({ env: [variable], prefix: "kb-" });
      expect(get(id).inject).toEqual({ headers: ["authorization"], format: "Bearer {secret}" });
    }
  });

  it("binds each host to exactly one provider", () => {
    const probes = [
      "api.openai.com",
      "myres.openai.azure.com",
      "router.huggingface.co",
      "openrouter.ai",
      "api.x.ai",
    ];
    for (const host of probes) {
      const owners = rules.providers.filter((p) => p.hosts.some((h) => hostMatches(h, host, 443)));
      expect(owners, host).toHaveLength(1);
    }
    expect(rules.providers.some((p) => p.hosts.some((h) => hostMatches(h, "openai.azure.com", 443)))).toBe(
      false,
    );
  });
});
