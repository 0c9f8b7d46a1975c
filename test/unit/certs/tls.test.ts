// Real TLS handshakes against leaves from the minter: a python client (OpenSSL, strict X.509)
// and node's own client.
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import {
  type ConnectionOptions,
  connect,
  createServer,
  type Server,
  type TLSSocket,
  type TlsOptions,
} from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CertificateAuthority, loadOrCreateCa } from "../../../certs/ca.js";
import { LeafMinter } from "../../../certs/leaf.js";
import { makeHome, removeHomes, run } from "./helpers.js";

const PYTHON = "/usr/bin/python3";

/** Connects, verifies strictly against the given CA file, prints the server's greeting. */
const PYTHON_CLIENT = `
import socket, ssl, sys
cafile, port, server_hostname = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context(cafile=cafile)
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
    try:
        with ctx.wrap_socket(raw, server_hostname=server_hostname) as tls:
            cert = tls.getpeercert()
            greeting = tls.recv(64).decode().strip()
            print("HANDSHAKE_OK", tls.version(), dict(x[0] for x in cert["subject"])["commonName"], greeting)
    except ssl.SSLCertVerificationError as err:
        print("VERIFY_FAILED", err.verify_message)
        sys.exit(3)
`;

let ca: CertificateAuthority;
let minter: LeafMinter;
const servers: Server[] = [];

beforeAll(() => {
  ca = loadOrCreateCa(makeHome());
  minter = new LeafMinter(ca);
});

afterAll(async () => {
  await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  removeHomes();
});

/** A TLS server on 127.0.0.1 that greets each client with "hello from keybroker". */
async function listen(options: TlsOptions): Promise<number> {
  const server = createServer(options, (socket) => {
    // A client may reset the connection once it has what it came for (Node 24 then reports
    // ECONNRESET on this side); what these tests check is the handshake, on the client side.
    socket.on("error", () => {});
    socket.end("hello from keybroker\n");
  });
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as AddressInfo).port;
}

function python(cafile: string, port: number, serverHostname: string) {
  return run(PYTHON, ["-c", PYTHON_CLIENT, cafile, String(port), serverHostname]);
}

/** Connects with node's client and resolves once the handshake is verified (or rejects). */
async function nodeConnect(options: ConnectionOptions): Promise<TLSSocket> {
  const socket = connect(options);
  try {
    await once(socket, "secureConnect");
  } catch (err) {
    socket.destroy();
    throw err;
  }
  return socket;
}

describe("leaf certificates in real TLS handshakes", () => {
  it("python with VERIFY_X509_STRICT accepts the leaf for its host and rejects another name", async () => {
    // Always presents the api.example.com leaf, whatever name the client asks for.
    const port = await listen({
      SNICallback: (_servername, cb) => cb(null, minter.secureContext("api.example.com")),
    });

    const ok = await python(ca.certPath, port, "api.example.com");
    expect(ok.stderr).toBe("");
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^HANDSHAKE_OK TLSv1\.[23] api\.example\.com hello from keybroker$/m);

    const wrongName = await python(ca.certPath, port, "evil.example.net");
    expect(wrongName.code).toBe(3);
    expect(wrongName.stdout).toMatch(/^VERIFY_FAILED .*hostname mismatch/im);
  });

  it("python rejects the leaf when it trusts another CA", async () => {
    const other = loadOrCreateCa(makeHome());
    const port = await listen({
      SNICallback: (servername, cb) => cb(null, minter.secureContext(servername)),
    });
    const out = await python(other.certPath, port, "api.example.com");
    expect(out.code).toBe(3);
    expect(out.stdout).toMatch(/^VERIFY_FAILED .*local issuer/im);
  });

  it("mints per SNI name when the server asks the minter for the client's name", async () => {
    const port = await listen({
      SNICallback: (servername, cb) => cb(null, minter.secureContext(servername)),
    });
    for (const name of ["api.example.com", "other.example.org"]) {
      const out = await python(ca.certPath, port, name);
      expect(out.code).toBe(0);
      expect(out.stdout).toContain(`HANDSHAKE_OK`);
      expect(out.stdout).toContain(` ${name} hello from keybroker`);
    }
  });

  it("node's client verifies a DNS-name leaf with ca and servername, and negotiates ALPN", async () => {
    const port = await listen({
      ALPNProtocols: ["h2", "http/1.1"],
      SNICallback: (servername, cb) => cb(null, minter.secureContext(servername)),
    });
    const socket = await nodeConnect({
      host: "127.0.0.1",
      port,
      servername: "api.example.com",
      ca: [ca.certPem],
      ALPNProtocols: ["http/1.1"],
    });
    expect(socket.authorized).toBe(true);
    expect(socket.getPeerCertificate().subjectaltname).toBe("DNS:api.example.com");
    expect(socket.alpnProtocol).toBe("http/1.1");
    socket.destroy();
  });

  it("node's client verifies an IP-literal leaf through its IP SAN", async () => {
    // Clients send no SNI for IP addresses, so the IP leaf is the server's default certificate.
    const leaf = minter.mint("127.0.0.1");
    const port = await listen({ cert: leaf.certPem, key: leaf.keyPem });
    const socket = await nodeConnect({ host: "127.0.0.1", port, ca: [ca.certPem] });
    expect(socket.authorized).toBe(true);
    expect(socket.getPeerCertificate().subjectaltname).toBe("IP Address:127.0.0.1");
    socket.destroy();

    // The same certificate is refused when the client expects a DNS name.
    await expect(
      nodeConnect({ host: "127.0.0.1", port, servername: "api.example.com", ca: [ca.certPem] }),
    ).rejects.toThrow(/does not match certificate's altnames|Hostname\/IP does not match/);
  });

  it("node's client refuses the leaf without the CA", async () => {
    const port = await listen({
      SNICallback: (servername, cb) => cb(null, minter.secureContext(servername)),
    });
    await expect(
      nodeConnect({ host: "127.0.0.1", port, servername: "api.example.com", ca: [] }),
    ).rejects.toThrow(/self.signed|unable to get local issuer|unable to verify/i);
  });
});
