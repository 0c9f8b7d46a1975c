// The subscription logins agents use (docs/spec.md §6, §19), as OAuth providers of the embedded
// catalogue: each with the endpoints, public client id, scopes and redirect URI that the agent
// itself uses (decision 160 cites where each value was read), and the hosts its tokens go to.
// Their token endpoints are named (no discovery) so keybroker knows, when the rules load, which
// hosts to intercept to take an agent's own sign-in and refresh into custody (decision 161).
import type { ProviderInput } from "./schema/index.js";

export const OAUTH_CATALOGUE: Readonly<Record<string, ProviderInput>> = Object.freeze({
  // ChatGPT sign-in, as Codex CLI (codex-rs/login) and hermes' openai-codex use it.
  "codex-oauth": {
    hosts: ["chatgpt.com"],
    mount: "/p/codex-oauth",
    upstream: "https://chatgpt.com/backend-api",
    inject: { header: "authorization", format: "Bearer {secret}" },
    oauth: {
      grant: "pkce",
      authorization_endpoint: "https://auth.openai.com/oauth/authorize",
      token_endpoint: "https://auth.openai.com/oauth/token",
      revocation_endpoint: "https://auth.openai.com/oauth/revoke",
      client_id: "app_EMoamEEZ73f0CkXaXp7hrann",
      // As Codex CLI 0.171 asks them (phantom-codex-login.test.ts compares with the real one).
      scopes: [
        "openid",
        "profile",
        "email",
        "offline_access",
        "api.connectors.read",
        "api.connectors.invoke",
      ],
      // Codex's allow-listed loopback redirect: a fixed port (1457 is its fallback).
      redirect_uri: "http://127.0.0.1:1455/auth/callback",
      authorize_params: {
        id_token_add_organizations: "true",
        codex_cli_simplified_flow: "true",
        originator: "codex_cli_rs",
      },
    },
  },
  // Claude Pro/Max sign-in, as Claude Code uses it (values of the public implementations).
  "claude-oauth": {
    hosts: ["api.anthropic.com"],
    mount: "/p/claude-oauth",
    upstream: "https://api.anthropic.com",
    inject: { header: "authorization", format: "Bearer {secret}" },
    placeholder: { env: "CLAUDE_OAUTH_ACCESS_TOKEN", prefix: "sk-ant-oat01-kb-" },
    oauth: {
      grant: "pkce",
      authorization_endpoint: "https://claude.ai/oauth/authorize",
      token_endpoint: "https://platform.claude.com/v1/oauth/token",
      revocation_endpoint: "https://platform.claude.com/v1/oauth/revoke",
      client_id: "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
      scopes: [
        "org:create_api_key",
        "user:profile",
        "user:inference",
        "user:sessions:claude_code",
        "user:mcp_servers",
        "user:file_upload",
      ],
      redirect_uri: "http://localhost:53692/callback",
    },
  },
  // Google sign-in, as Gemini CLI (packages/core/src/code_assist/oauth2.ts) uses it: an
  // installed-app client whose secret Google publishes as not secret. Its tokens are used at
  // cloudcode-pa.googleapis.com and checked at tokeninfo and userinfo, on hosts every Google API
  // shares: there a phantom is swapped on those two paths only (token_info_endpoint,
  // userinfo_endpoint), and nothing else on those hosts is touched.
  "gemini-oauth": {
    hosts: ["cloudcode-pa.googleapis.com"],
    mount: "/p/gemini-oauth",
    upstream: "https://cloudcode-pa.googleapis.com",
    inject: { header: "authorization", format: "Bearer {secret}" },
    placeholder: { env: "GEMINI_OAUTH_ACCESS_TOKEN", prefix: "ya29.kb-" },
    oauth: {
      grant: "pkce",
      authorization_endpoint: "https://accounts.google.com/o/oauth2/v2/auth",
      token_endpoint: "https://oauth2.googleapis.com/token",
      revocation_endpoint: "https://oauth2.googleapis.com/revoke",
      token_info_endpoint: "https://oauth2.googleapis.com/tokeninfo",
      userinfo_endpoint: "https://www.googleapis.com/oauth2/v2/userinfo",
      client_id: "681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com",
      public_client_secret: "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",
      id_token_issuer: "https://accounts.google.com",
      scopes: [
        "https://www.googleapis.com/auth/cloud-platform",
        "https://www.googleapis.com/auth/userinfo.email",
        "https://www.googleapis.com/auth/userinfo.profile",
      ],
      redirect_uri: "http://127.0.0.1:8765/oauth2callback",
      authorize_params: { access_type: "offline", prompt: "consent" },
    },
  },
  // Qwen sign-in, as Qwen Code (packages/core/src/qwen/qwenOAuth2.ts) uses it: the device grant
  // at chat.qwen.ai with a PKCE challenge at the start and its verifier at the poll; the token
  // answer's resource_url names the host its tokens are used at, portal.qwen.ai (decision 174).
  "qwen-oauth": {
    hosts: ["portal.qwen.ai"],
    mount: "/p/qwen-oauth",
    upstream: "https://portal.qwen.ai",
    inject: { header: "authorization", format: "Bearer {secret}" },
    oauth: {
      grant: "device",
      device_authorization_endpoint: "https://chat.qwen.ai/api/v1/oauth2/device/code",
      token_endpoint: "https://chat.qwen.ai/api/v1/oauth2/token",
      client_id: "f0304373b74a44d2b584a3fb70ca9e56",
      scopes: ["openid", "profile", "email", "model.completion"],
      device_pkce: true,
      api_base_field: "resource_url",
    },
  },
  // Nous Portal sign-in, as hermes-agent (hermes_cli/auth_nous.py, auth_device_flow.py,
  // auth_constants.py) uses it: the device grant at portal.nousresearch.com with the public client
  // hermes-cli; a refresh sends the refresh token in the x-nous-refresh-token header, not the
  // body; the token answer's inference_base_url names the API, inference-api.nousresearch.com or,
  // for a free account, welcome-api.nousresearch.com (decision 175).
  "nous-oauth": {
    hosts: ["inference-api.nousresearch.com", "welcome-api.nousresearch.com"],
    mount: "/p/nous-oauth",
    upstream: "https://inference-api.nousresearch.com",
    inject: { header: "authorization", format: "Bearer {secret}" },
    oauth: {
      grant: "device",
      device_authorization_endpoint: "https://portal.nousresearch.com/api/oauth/device/code",
      token_endpoint: "https://portal.nousresearch.com/api/oauth/token",
      client_id: "hermes-cli",
      scopes: ["inference:invoke"],
      refresh_token_header: "x-nous-refresh-token",
      api_base_field: "inference_base_url",
    },
  },
});
