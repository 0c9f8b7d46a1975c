// Every key the rule file's schema accepts reaches the compiled rules: a key added to a section
// of rules/schema/ without its compile step (or its place in the compiled types) fails here.
// The file below sets every key to a value other than its default; taking any one key out must
// change what compiles (or make the file invalid, for a key the file cannot do without).
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { RuleFileError } from "../../../rules/errors.js";
import { parseRules } from "../../../rules/load.js";
import { ruleFileSchema } from "../../../rules/schema/index.js";

/** The dotted path of every object key in a schema: `*` for a map's entries, `[]` for a list's. */
function keyPaths(schema: unknown, path: readonly string[] = [], out: string[] = []): string[] {
  const def = (schema as { _zod: { def: Record<string, unknown> & { type: string } } })._zod.def;
  switch (def.type) {
    case "object":
      for (const [key, value] of Object.entries(def.shape as Record<string, unknown>)) {
        out.push([...path, key].join("."));
        keyPaths(value, [...path, key], out);
      }
      break;
    case "optional":
    case "nullable":
    case "default":
    case "readonly":
      keyPaths(def.innerType, path, out);
      break;
    case "record":
      keyPaths(def.valueType, [...path, "*"], out);
      break;
    case "array":
      keyPaths(def.element, [...path, "[]"], out);
      break;
    case "union":
      for (const option of def.options as unknown[]) keyPaths(option, path, out);
      break;
    case "pipe":
      keyPaths(def.in, path, out);
      break;
  }
  return [...new Set(out)];
}

const approve = {
  method: ["post"],
  path: ["/v1/**"],
  case: "insensitive",
  roles: ["user"],
  clients: ["ci"],
  launch: ["claude"],
  timeout: "30s",
};

/** A rule file that sets every key, none to its default. */
const EVERYTHING = {
  version: 1,
  listen: "127.0.0.1:9911",
  intercept: "all",
  upstream_ca: ["ca/extra.pem"],
  resolve: { "api.example.com:443": "127.0.0.1:9443" },
  state: { url: "redis://127.0.0.1:6379/0", password: "env:REDIS_PASSWORD", prefix: "kbtest:" },
  sources: {
    order: ["infisical", "env"],
    dotenv: "secrets/.env",
    infisical: {
      site_url: "https://infisical.example.com",
      project_id: "p1",
      environment: "prod",
      path: "/agents",
      auth: { client_id: "env:INF_ID", client_secret: "env:INF_SECRET" },
      ttl: "2m",
      timeout: "3s",
      grace: "1h",
    },
    cmd: { timeout: "4s", ttl: "1m", grace: "2h" },
  },
  providers: {
    keys: {
      hosts: ["api.example.com"],
      inject: { header: ["x-api-key"], query: "key", basic: { username: "user" }, format: "Key {secret}" },
      credentials: ["env:KEY_ONE", "env:KEY_TWO"],
      pool: { strategy: "round_robin", affinity: "client", retry_body_limit: "1MiB", cooldown: "90s" },
      headers: { set: { "x-team": "agents" }, remove: ["x-debug"] },
      placeholder: { env: ["KEYS_API_KEY", "KEYS_TOKEN"], prefix: "kk-", value: "kb-fixed-placeholder" },
      policy: [
        {
          deny: {
            method: "delete",
            path: "/admin/**",
            case: "insensitive",
            roles: ["guest"],
            clients: ["ci"],
            launch: ["codex"],
          },
        },
        { approve },
      ],
      mount: "/p/keys-api/",
      upstream: "https://api.example.com/v1",
      allow_private_upstream: true,
      timeout: "45s",
    },
    backup: { hosts: ["backup.example.com"], upstream: "https://backup.example.com" },
    vertex: {
      hosts: ["vertex.example.com"],
      auth: { google_service_account: "file:sa.json", scopes: ["scope.a"], token_timeout: "7s" },
    },
    bedrock: {
      hosts: ["bedrock.example.com"],
      auth: {
        aws_sigv4: {
          region: "us-east-1",
          service: "bedrock",
          access_key_id: "env:AWS_ID",
          secret_access_key: "env:AWS_SECRET",
          session_token: "env:AWS_SESSION",
        },
      },
    },
    login: {
      hosts: ["login.example.com"],
      oauth: {
        grant: "pkce",
        issuer: "https://idp.example.com",
        device_authorization_endpoint: "https://idp.example.com/device",
        authorization_endpoint: "https://idp.example.com/authorize",
        token_endpoint: "https://idp.example.com/token",
        revocation_endpoint: "https://idp.example.com/revoke",
        token_info_endpoint: "https://idp.example.com/tokeninfo",
        userinfo_endpoint: "https://idp.example.com/userinfo",
        id_token_issuer: "https://accounts.example.com",
        device_pkce: true,
        refresh_token_header: "x-refresh-token",
        api_base_field: "resource_url",
        client_id: "app",
        client_secret: "env:APP_SECRET",
        client_auth: "client_secret_post",
        scopes: ["read"],
        authorize_params: { audience: "api" },
        token_params: { audience: "api" },
        redirect_uri: "http://127.0.0.1:8765/callback",
        token_headers: { "x-client": "kb" },
        max_response_bytes: "2MiB",
        token_timeout: "12s",
      },
    },
    installed: {
      hosts: ["installed.example.com"],
      oauth: {
        token_endpoint: "https://idp.example.com/token",
        authorization_endpoint: "https://idp.example.com/authorize",
        client_id: "installed-app",
        public_client_secret: "published-installed-app-secret",
      },
    },
    notes: {
      mcp: "https://mcp.example.com/mcp",
      oauth: { client_metadata_url: "https://me.example.org/kb.json" },
    },
  },
  fallbacks: { keys: ["backup", { provider: "backup", model: { "gpt-4o": "other-4o" } }] },
  clients: {
    ci: { token: "env:CI_TOKEN", providers: ["keys"], role: "admin", limits: { rpm: 60 } },
    other: { token: "env:OTHER_TOKEN" },
  },
  catalogue: false,
  run: { isolate: true },
  approvals: { timeout: "5m", max_pending: 3, max_bytes: "1MiB" },
  audit: { enabled: true, max_size: "1MiB", keep: 2, require: true },
  scrub: { responses: false },
  timeouts: { handshake: "2s", headers: "3s", keep_alive: "4s", tunnel_idle: "5s", upstream: "6s" },
  limits: { connections: 50 },
  notify: "cmd:/usr/local/bin/notify --to ops",
  log: { access: true },
};

/** Keys the schema knows only to refuse them with a message of their own. */
const REFUSED_ONLY = ["providers.*.policy.[].deny.timeout"];

/** Keys whose other value cannot stand beside the rest of EVERYTHING: taken out of this file instead. */
const VARIANTS: Readonly<Record<string, unknown>> = {
  // `require: true` needs the log on, so off is shown without it.
  "audit.enabled": { ...EVERYTHING, audit: { enabled: false, max_size: "1MiB", keep: 2 } },
};

/** A copy of `value` without the key at `path` (wherever a `*` or `[]` segment leads). */
function without(value: unknown, path: readonly string[]): unknown {
  if (path.length === 0 || typeof value !== "object" || value === null) return value;
  const [head, ...rest] = path as [string, ...string[]];
  if (Array.isArray(value)) return head === "[]" ? value.map((v) => without(v, rest)) : value;
  const record = value as Record<string, unknown>;
  if (head === "*") return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, without(v, rest)]));
  if (!Object.hasOwn(record, head)) return value;
  if (rest.length === 0) {
    const { [head]: _, ...others } = record;
    return others;
  }
  return { ...record, [head]: without(record[head], rest) };
}

/** Whether the file sets the key at `path` somewhere. */
function sets(value: unknown, path: readonly string[]): boolean {
  if (path.length === 0) return true;
  if (typeof value !== "object" || value === null) return false;
  const [head, ...rest] = path as [string, ...string[]];
  if (Array.isArray(value)) return head === "[]" && value.some((v) => sets(v, rest));
  const record = value as Record<string, unknown>;
  if (head === "*") return Object.values(record).some((v) => sets(v, rest));
  return Object.hasOwn(record, head) && sets(record[head], rest);
}

/** The compiled rules as text (maps included), or undefined when the file does not load. */
function compiled(file: unknown): string | undefined {
  try {
    const rules = parseRules(stringify(file), "coverage.yaml", "/etc/kb");
    return JSON.stringify(rules, (_, v: unknown) => (v instanceof Map ? [...v.entries()] : v));
  } catch (err) {
    if (err instanceof RuleFileError) return undefined;
    throw err;
  }
}

describe("every rule-file key reaches the compiled rules", () => {
  const paths = keyPaths(ruleFileSchema).filter((path) => !REFUSED_ONLY.includes(path));
  const baseline = compiled(EVERYTHING);

  it("the file that sets every key loads", () => {
    expect(baseline).toBeDefined();
    expect(paths.length).toBeGreaterThan(100);
  });

  it("the file sets every key the schema has", () => {
    expect(paths.filter((path) => !sets(EVERYTHING, path.split(".")))).toEqual([]);
  });

  it.each(paths)("%s", (path) => {
    const file = VARIANTS[path] ?? EVERYTHING;
    const before = file === EVERYTHING ? baseline : compiled(file);
    expect(before).toBeDefined();
    const after = compiled(without(file, path.split(".")));
    // A key the file cannot do without makes it invalid; any other changes what compiles.
    if (after !== undefined) expect(after).not.toEqual(before);
  });
});
