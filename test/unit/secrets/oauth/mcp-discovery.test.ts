// How `auth add` finds an MCP server's authorization server and which client it is there
// (docs/spec.md §15), against a real HTTPS server on 127.0.0.1: the challenge's resource_metadata,
// the path-aware and root well-known URLs, RFC 8414 then OpenID metadata with the issuer
// checked, PKCE S256 required, the client identity order, registrations kept per issuer, and
// every answer capped like a token answer.
import { mkdtempSync, readFileSync } from "node:fs";
import type { ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent } from "undici";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { McpSpec, OAuthSpec } from "../../../../rules/types.js";
import { cappedFetch } from "../../../../secrets/oauth/capped-fetch.js";
import {
  bearerChallenge,
  discoverMcp,
  McpDiscoveryError,
  scopesFor,
} from "../../../../secrets/oauth/mcp-discovery.js";
import { clientIdentity } from "../../../../secrets/oauth/mcp-registration.js";
import { HomeMcpStore } from "../../../../state/mcp/home.js";
import { type FakeUpstream, startUpstream } from "../../../helpers/upstream.js";

let u: FakeUpstream;
let agent: Agent;
let server: URL;
let issuer: string;
const fetch = () => cappedFetch({ dispatcher: agent, maxBytes: 4096, timeoutMs: 2000 });

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
};
const asMetadata = (extra: Record<string, unknown> = {}) => ({
  issuer,
  authorization_endpoint: `${issuer}/authorize`,
  token_endpoint: `${issuer}/token`,
  registration_endpoint: `${issuer}/register`,
  code_challenge_methods_supported: ["S256"],
  scopes_supported: ["notes", "offline_access"],
  ...extra,
});

beforeAll(async () => {
  u = await startUpstream();
  server = new URL(`https://mcp.test:${u.port}/mcp`);
  issuer = `https://login.test:${u.port}`;
  agent = new Agent({
    connect: {
      ca: readFileSync(u.caPath, "utf8"),
      lookup: (_h, _o, cb) => cb(null, [{ address: "127.0.0.1", family: 4 }]),
    },
  });
});
afterAll(async () => {
  await agent.close();
  await u.close();
});
beforeEach(() => {
  u.routes.clear();
  u.received.length = 0;
  const notFound = (_req: unknown, res: ServerResponse) => json(res, 404, { error: "not_found" });
  u.routes.set("POST /mcp", (_req, res) => {
    res.writeHead(401, {
      "www-authenticate": `Bearer error="invalid_token", scope="notes", resource_metadata="https://mcp.test:${u.port}/prm"`,
    });
    res.end();
  });
  u.routes.set("GET /prm", (_req, res) =>
    json(res, 200, { resource: server.href, authorization_servers: [issuer] }),
  );
  u.routes.set("GET /.well-known/oauth-protected-resource/mcp", notFound);
  u.routes.set("GET /.well-known/oauth-protected-resource", notFound);
  u.routes.set("GET /.well-known/oauth-authorization-server", (_req, res) => json(res, 200, asMetadata()));
  u.routes.set("GET /.well-known/openid-configuration", notFound);
});

const paths = () => u.received.map((r) => `${r.method} ${r.url}`);

describe("discovery", () => {
  it("follows the challenge's resource_metadata and takes its scope", async () => {
    const d = await discoverMcp(server, fetch());
    expect(d.resourceMetadataUrl).toBe(`https://mcp.test:${u.port}/prm`);
    expect(d.server.issuer).toBe(issuer);
    expect(scopesFor([], d)).toEqual(["notes", "offline_access"]);
    expect(paths()).toEqual(["POST /mcp", "GET /prm", "GET /.well-known/oauth-authorization-server"]);
  });

  it("without a challenge, tries the path-aware well-known URL, then the root one", async () => {
    u.routes.set("POST /mcp", (_req, res) => json(res, 200, { jsonrpc: "2.0", id: 0, result: {} }));
    u.routes.set("GET /.well-known/oauth-protected-resource", (_req, res) =>
      json(res, 200, {
        resource: server.origin,
        authorization_servers: [issuer],
        scopes_supported: ["a", "b"],
      }),
    );
    const d = await discoverMcp(server, fetch());
    expect(paths()).toEqual([
      "POST /mcp",
      "GET /.well-known/oauth-protected-resource/mcp",
      "GET /.well-known/oauth-protected-resource",
      "GET /.well-known/oauth-authorization-server",
    ]);
    expect(scopesFor([], d)).toEqual(["a", "b", "offline_access"]);
    // Configured scopes win; offline_access only when the server lists it.
    expect(scopesFor(["x"], { ...d, server: { ...d.server, scopes_supported: ["x"] } })).toEqual(["x"]);
  });

  it("falls back to OpenID discovery, and refuses metadata for another issuer", async () => {
    u.routes.set("GET /.well-known/oauth-authorization-server", (_req, res) => json(res, 404, {}));
    u.routes.set("GET /.well-known/openid-configuration", (_req, res) => json(res, 200, asMetadata()));
    expect((await discoverMcp(server, fetch())).server.issuer).toBe(issuer);
    u.routes.set("GET /.well-known/openid-configuration", (_req, res) =>
      json(res, 200, asMetadata({ issuer: "https://evil.test" })),
    );
    await expect(discoverMcp(server, fetch())).rejects.toThrow(/not valid/);
  });

  it("refuses a server without PKCE S256, and metadata for another resource", async () => {
    u.routes.set("GET /.well-known/oauth-authorization-server", (_req, res) =>
      json(res, 200, asMetadata({ code_challenge_methods_supported: ["plain"] })),
    );
    await expect(discoverMcp(server, fetch())).rejects.toThrow(/does not offer PKCE with S256/);
    u.routes.set("GET /prm", (_req, res) =>
      json(res, 200, { resource: "https://other.test/mcp", authorization_servers: [issuer] }),
    );
    await expect(discoverMcp(server, fetch())).rejects.toThrow(McpDiscoveryError);
  });

  it("caps a metadata answer like a token answer, and names the endpoint", async () => {
    u.routes.set("GET /prm", (_req, res) =>
      json(res, 200, { resource: server.href, authorization_servers: [issuer], pad: "x".repeat(10_000) }),
    );
    await expect(discoverMcp(server, fetch())).rejects.toThrow(
      `https://mcp.test:${u.port}/prm answered more than 4096 bytes`,
    );
  });

  it("parses the Bearer challenge of a WWW-Authenticate header", () => {
    expect(bearerChallenge('Basic realm="x", Bearer resource_metadata="https://a/b", scope="s t"')).toEqual({
      resource_metadata: "https://a/b",
      scope: "s t",
    });
    expect(bearerChallenge("Basic realm=x")).toBeUndefined();
  });
});

describe("client identity", () => {
  const spec = { clientId: "", clientAuth: "none" } as unknown as OAuthSpec;
  const mcp: McpSpec = { url: "https://mcp.test/mcp" };
  const base = () => ({
    spec,
    mcp,
    redirectUri: "http://127.0.0.1:8765/callback",
    fetch: fetch(),
    store: new HomeMcpStore(mkdtempSync(join(tmpdir(), "kb-mcp-"))),
    print: () => {},
  });
  const metadata = (extra: Record<string, unknown> = {}) =>
    ({ ...asMetadata(extra) }) as unknown as Parameters<typeof clientIdentity>[0]["server"];

  it("uses a configured client_id without registering", async () => {
    const id = await clientIdentity({ ...base(), spec: { ...spec, clientId: "pre" }, server: metadata() });
    expect(id).toEqual({ clientId: "pre", authMethod: "none", source: "configured" });
    expect(u.received).toEqual([]);
  });

  it("uses the client ID metadata document when the server supports them", async () => {
    const withDoc = { ...base(), mcp: { ...mcp, clientMetadataUrl: "https://me.test/kb.json" } };
    expect(
      await clientIdentity({ ...withDoc, server: metadata({ client_id_metadata_document_supported: true }) }),
    ).toMatchObject({ clientId: "https://me.test/kb.json", source: "metadata_document" });
    expect(u.received).toEqual([]);
  });

  it("registers once per issuer as a native public client, and reuses the registration", async () => {
    let n = 0;
    u.routes.set("POST /register", (_req, res) =>
      json(res, 201, { client_id: `registered-${++n}`, token_endpoint_auth_method: "none" }),
    );
    const b = base();
    const first = await clientIdentity({ ...b, server: metadata() });
    expect(first).toMatchObject({ clientId: "registered-1", source: "registered" });
    expect(JSON.parse(u.received[0]!.body.toString())).toMatchObject({
      application_type: "native",
      token_endpoint_auth_method: "none",
      redirect_uris: ["http://127.0.0.1:8765/callback"],
    });
    expect(await clientIdentity({ ...b, server: metadata() })).toMatchObject({ clientId: "registered-1" });
    // Another authorization server registers anew.
    expect(
      await clientIdentity({ ...b, server: metadata({ issuer: `https://login2.test:${u.port}` }) }),
    ).toMatchObject({ clientId: "registered-2" });
    expect(n).toBe(2);
  });

  it("says what to configure when there is no way to be a client", async () => {
    await expect(
      clientIdentity({ ...base(), server: metadata({ registration_endpoint: undefined }) }),
    ).rejects.toThrow(/offers no dynamic client registration.*set oauth\.client_id/);
  });
});
