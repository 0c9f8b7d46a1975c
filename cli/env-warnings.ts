// Traps `keybroker env` warns about on stderr (decisions 124, 143): the variables it prints point
// at a broker nobody started, at another home's broker or another program, or at a Node whose
// fetch ignores the proxy variables.
import { foreignBroker, isForeign, probePort } from "./port-probe.js";

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
  /** The home's CA fingerprint: a keybroker with another one is another home's. */
  homeCa: string | undefined;
  nodePreload: boolean;
  nodeVersion?: string;
}): Promise<string[]> {
  const out: string[] = [];
  if (!opts.running) {
    const where = new URL(opts.url).host;
    const answer = await probePort(opts.url);
    if (answer.kind === "nothing") {
      out.push(
        `no broker is running on ${where}: start one with \`keybroker start\` (or use \`keybroker run\`)`,
      );
    } else if (answer.kind === "other") {
      out.push(
        `${where} is held by a program that is not keybroker: start keybroker on another port (keybroker start --port N, or listen: in the rule file): env then names that one`,
      );
    } else if (isForeign(answer, opts.homeCa)) {
      out.push(
        `${foreignBroker(where, answer)}, so the agent's TLS through it fails with a certificate error: start this home's broker on another port (keybroker start --port N: env then names that one), or use that broker's --home`,
      );
    }
  }
  const version = opts.nodeVersion ?? process.versions.node;
  if (!opts.nodePreload && nodeIgnoresProxy(version)) {
    out.push(
      `this is Node ${version}, whose fetch ignores HTTPS_PROXY: a Node agent started with these variables bypasses keybroker; add --node-preload (or use \`keybroker run\`)`,
    );
  }
  return out;
}
