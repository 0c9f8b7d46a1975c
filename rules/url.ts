// The one URL validator of the rule file: every URL-valued key (OAuth endpoints, a reverse-mode
// upstream, a redirect URI, an MCP server, the fleet's Redis) is parsed here and checked by a
// list of named checks, in the order its key lists them, each with the message that says what
// to write instead.

/** One check of a parsed URL: the problem, or undefined when the URL passes it. */
export type UrlCheck = (url: URL) => string | undefined;

/**
 * Parses `value` and runs `checks` in order; throws an Error whose message is the first
 * problem found (`is not a URL — <write>` when it does not parse). The message never quotes
 * the value: a credential pasted into the wrong key must not end up in an error.
 */
export function checkUrl(value: string, write: string, checks: readonly UrlCheck[]): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`is not a URL — ${write}`);
  }
  for (const check of checks) {
    const problem = check(url);
    if (problem !== undefined) throw new Error(problem);
  }
  return url;
}

/** `localhost`, `[::1]` or 127.x.y.z: where plain http is accepted (local fakes and servers). */
export function isLoopbackUrlHost(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** https anywhere, plain http only toward loopback. */
export function httpsOrLoopbackHttp(url: URL): boolean {
  return url.protocol === "https:" || (url.protocol === "http:" && isLoopbackUrlHost(url.hostname));
}

/** The URL's scheme (and host, for some) is one `allowed` accepts. */
export function scheme(allowed: (url: URL) => boolean, message: string): UrlCheck {
  return (url) => (allowed(url) ? undefined : message);
}

/** No `user:password@` in the URL. */
export function noCredentials(message = "must not carry credentials"): UrlCheck {
  return (url) => (url.username !== "" || url.password !== "" ? message : undefined);
}

/** No password in the URL (a user name alone is allowed). */
export function noPassword(message: string): UrlCheck {
  return (url) => (url.password !== "" ? message : undefined);
}

/** A host is named. */
export function someHost(message: string): UrlCheck {
  return (url) => (url.hostname === "" ? message : undefined);
}

/** No `?query` and no `#fragment`. */
export function noQueryOrFragment(message: string | ((url: URL) => string)): UrlCheck {
  return (url) =>
    url.search === "" && url.hash === "" ? undefined : typeof message === "string" ? message : message(url);
}

/** No `#fragment`. */
export function noFragment(message: string): UrlCheck {
  return (url) => (url.hash !== "" ? message : undefined);
}

/** The path matches `pattern`. */
export function pathMatching(pattern: RegExp, message: string): UrlCheck {
  return (url) => (pattern.test(url.pathname) ? undefined : message);
}
