// The embedded default catalogue (docs/spec.md §6): the common providers, written exactly as a rule file
// would write them. A rule file's provider of the same id is merged over its entry; the others
// serve as they are unless the file says `catalogue: false`. Data only: defaults (format,
// credentials = [placeholder variable], pool) are filled by the same compiler as a rule file's.
import { OAUTH_CATALOGUE } from "./catalogue-oauth.js";
import type { ProviderInput } from "./schema/index.js";

export const CATALOGUE_ORIGIN = "embedded default catalogue";

/** Placeholder prefix for providers that set none. */
export const DEFAULT_PLACEHOLDER_PREFIX = "kb-";

/**
 * A provider reachable both as an intercepted host and at `/p/<id>` in reverse mode. `env` lists
 * the variables agents and SDKs read its key from, the usual one first (decision 122).
 */
function api(id: string, origin: string, env: string | string[], extra: ProviderInput = {}): ProviderInput {
  return {
    hosts: [new URL(origin).host],
    placeholder: { env, prefix: DEFAULT_PLACEHOLDER_PREFIX },
    mount: `/p/${id}`,
    upstream: origin,
    ...extra,
  };
}

export const CATALOGUE: Readonly<Record<string, ProviderInput>> = Object.freeze({
  openai: api("openai", "https://api.openai.com", "OPENAI_API_KEY", {
    inject: { header: "authorization", format: "Bearer {secret}" },
    // Codex's `codex exec` reads CODEX_API_KEY.
    placeholder: { env: ["OPENAI_API_KEY", "CODEX_API_KEY"], prefix: "sk-kb-" },
  }),
  anthropic: api("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", {
    // Current SDKs send either header, depending on API key vs. auth token configuration.
    inject: { header: ["x-api-key", "authorization"] },
    placeholder: { env: "ANTHROPIC_API_KEY", prefix: "sk-ant-kb-" },
  }),
  // OpenRouter serves the OpenAI API shape under /api, so /p/openrouter/v1/... works like /p/openai.
  openrouter: api("openrouter", "https://openrouter.ai/api", "OPENROUTER_API_KEY", {
    hosts: ["openrouter.ai"],
  }),
  // Gemini CLI reads GEMINI_API_KEY, Google's genai SDKs GOOGLE_API_KEY first, the Vercel AI SDK
  // (opencode) GOOGLE_GENERATIVE_AI_API_KEY.
  gemini: api(
    "gemini",
    "https://generativelanguage.googleapis.com",
    ["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"],
    { inject: { header: "x-goog-api-key", query: "key" } },
  ),
  groq: api("groq", "https://api.groq.com", "GROQ_API_KEY"),
  mistral: api("mistral", "https://api.mistral.ai", "MISTRAL_API_KEY"),
  deepseek: api("deepseek", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
  xai: api("xai", "https://api.x.ai", "XAI_API_KEY"),
  // LiteLLM reads TOGETHERAI_API_KEY, the Vercel AI SDK TOGETHER_AI_API_KEY.
  together: api(
    "together",
    "https://api.together.xyz",
    ["TOGETHER_API_KEY", "TOGETHERAI_API_KEY", "TOGETHER_AI_API_KEY"],
    {
      hosts: ["api.together.xyz", "api.together.ai"],
    },
  ),
  // LiteLLM's names second.
  fireworks: api("fireworks", "https://api.fireworks.ai", ["FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY"]),
  perplexity: api("perplexity", "https://api.perplexity.ai", ["PERPLEXITY_API_KEY", "PERPLEXITYAI_API_KEY"]),
  // huggingface_hub's older name, then LiteLLM's.
  huggingface: api(
    "huggingface",
    "https://router.huggingface.co",
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_API_KEY"],
    {
      hosts: ["huggingface.co", "api-inference.huggingface.co", "router.huggingface.co"],
    },
  ),
  // Every Azure OpenAI resource has its own host, so there is no single upstream to mount:
  // reverse mode needs a rule-file entry naming the resource (mount + upstream).
  "azure-openai": {
    hosts: ["*.openai.azure.com"],
    inject: { header: "api-key" },
    // The openai SDK's AzureOpenAI reads AZURE_OPENAI_API_KEY; LiteLLM and the Vercel AI SDK AZURE_API_KEY.
    placeholder: { env: ["AZURE_OPENAI_API_KEY", "AZURE_API_KEY"], prefix: DEFAULT_PLACEHOLDER_PREFIX },
  },
  nous: api("nous", "https://inference-api.nousresearch.com", "NOUS_API_KEY"),
  ...OAUTH_CATALOGUE,
});
