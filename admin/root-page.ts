// What a person who opens the listener's address in a browser sees (decision 142): what this
// port is, how to point an agent at it, and the way to the admin page. Static text only: the
// listener may be reachable by others (off loopback, or another user of this machine), so it
// names no provider, rule, address, version or token.
import type { IncomingMessage, ServerResponse } from "node:http";
import { SECURITY_HEADERS } from "./page-http.js";

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>keybroker</title>
</head>
<body>
<main>
<h1>keybroker</h1>
<p>This address is keybroker's proxy: a local HTTPS credential broker for AI agents. An agent
sends its requests through it holding placeholders; keybroker puts the real keys in on the way
to each provider's own hosts. There is nothing to browse here.</p>
<h2>Point an agent at it</h2>
<p>In the agent's shell, on this machine:</p>
<pre><code>eval "$(keybroker env)"</code></pre>
<p>or start the agent through keybroker:</p>
<pre><code>keybroker run -- COMMAND</code></pre>
<h2>Admin page</h2>
<p><a href="/admin/">Open the admin page</a>. To log in, run <code>keybroker admin</code> on
this machine: it prints a one-time login link (<code>keybroker admin password</code> sets a
password instead).</p>
</main>
</body>
</html>
`;

/** True for a request a browser makes when a person opens the address (it asks for HTML). */
export function wantsHtml(req: IncomingMessage): boolean {
  const accept = req.headers.accept;
  return typeof accept === "string" && /(^|[,\s])text\/html\b/i.test(accept);
}

export function sendRootPage(req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(200, {
    ...SECURITY_HEADERS,
    "content-type": "text/html; charset=utf-8",
    "content-length": Buffer.byteLength(PAGE),
  });
  res.end(req.method === "HEAD" ? undefined : PAGE);
}
