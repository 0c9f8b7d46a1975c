// Traps `keybroker env` warns about on stderr (decision 124): the variables it prints point at
// a broker nobody started, or at a Node whose fetch ignores the proxy variables.

/** True when a keybroker answers its health check at `url`. */
export async function brokerAnswers(url: string): Promise<boolean> {
  try {
    const res = await fetch(`${url}/__keybroker/health`, { signal: AbortSignal.timeout(1500) });
    const body = (await res.json()) as { ok?: boolean };
    return body.ok === true;
  } catch {
    return false;
  }
}

/**
 * Node before 22.21 ignores HTTPS_PROXY in global fetch (NODE_USE_ENV_PROXY came with 22.21 and
 * 24): an agent on it started with these variables alone would bypass the broker.
 */
export function nodeIgnoresProxy(version: string = process.versions.node): boolean {
  const [major = 0, minor = 0] = version.split(".").map(Number);
  return major < 22 || (major === 22 && minor < 21);
}

/** The warnings for the variables `env` is about to print toward the broker at `url`. */
export async function envWarnings(opts: {
  url: string;
  running: boolean;
  nodePreload: boolean;
  nodeVersion?: string;
}): Promise<string[]> {
  const out: string[] = [];
  if (!opts.running && !(await brokerAnswers(opts.url))) {
    out.push(
      `no broker is running on ${new URL(opts.url).host}: start one with \`keybroker start\` (or use \`keybroker run\`)`,
    );
  }
  const version = opts.nodeVersion ?? process.versions.node;
  if (!opts.nodePreload && nodeIgnoresProxy(version)) {
    out.push(
      `this is Node ${version}, whose fetch ignores HTTPS_PROXY: a Node agent started with these variables bypasses keybroker; add --node-preload (or use \`keybroker run\`)`,
    );
  }
  return out;
}
