// `run` keeps real secrets out of its command's environment: the variables the rules read them
// from, and any other variable whose value holds one of them in a form the scrubber knows
// (plain, JSON-escaped, URL-encoded, base64), whatever its name (`MY_COPY=$OPENAI_API_KEY`).
import { secretForms } from "../core/scrub.js";
import type { Runtime } from "../proxy/runtime.js";

/** Shorter values are not looked for inside other variables: they would match by chance. */
const MIN_SEARCHED_LENGTH = 8;

/** Every real secret a runtime resolved: pool members, service-account parts, client tokens. */
export function resolvedSecrets(rt: Runtime): string[] {
  const out: string[] = [];
  for (const p of rt.providers.values()) {
    for (const r of p.resolutions) if (r.secret !== undefined) out.push(r.secret.reveal());
  }
  for (const c of rt.clients.values()) if (c.token !== undefined) out.push(c.token.reveal());
  return out;
}

/**
 * Deletes from `env` the variables in `names`, then every other variable whose value contains a
 * form of one of `secrets` or of the deleted values. Returns the names deleted for their value.
 */
export function stripSecrets(
  env: NodeJS.ProcessEnv,
  names: Iterable<string>,
  secrets: Iterable<string>,
): string[] {
  const values = new Set(secrets);
  for (const name of names) {
    const value = env[name];
    if (value !== undefined) values.add(value);
    delete env[name];
  }
  const forms = [...values]
    .filter((v) => v.length >= MIN_SEARCHED_LENGTH)
    .flatMap(secretForms)
    .filter((f) => f.length >= MIN_SEARCHED_LENGTH);
  const removed: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && forms.some((f) => value.includes(f))) {
      delete env[name];
      removed.push(name);
    }
  }
  return removed.sort();
}
