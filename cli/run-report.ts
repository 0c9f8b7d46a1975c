// What `run` tells the user the command gets (decision 143), on stderr: a line per provider
// naming the variables that hold its placeholder (silenced by --quiet), and warnings that stay:
// a provider the broker has no credential for, and a key variable `run` removed that no
// placeholder replaces (a command reading it finds it unset).
import type { AgentView } from "../admin/agent-view.js";

export interface RunReport {
  /** What the command gets: shown unless --quiet. */
  readonly lines: string[];
  /** What will not work as the user may expect: always shown. */
  readonly warnings: string[];
}

/**
 * `view` is the agent's view the command runs with; `before` the environment `run` was given
 * (before it removed real secrets); `own` the address of the broker `run` started itself.
 */
export function runReport(view: AgentView, before: NodeJS.ProcessEnv, own: string | undefined): RunReport {
  const lines: string[] = [];
  const warnings: string[] = [];
  if (own !== undefined) {
    lines.push(`no broker runs for this home: one of run's own serves the command on ${own} until it exits`);
  }
  for (const p of view.details ?? []) {
    if (p.variables.length > 0) lines.push(`${p.id}: placeholder in ${p.variables.join(", ")}`);
    if (!p.credential) {
      warnings.push(
        `the broker has no credential for ${p.id}: the command's requests to it get 503 credential_unavailable; set ${p.keyVariables[0] ?? "its key"} where the broker reads it (keybroker check says where it looked)`,
      );
    }
    for (const name of p.keyVariables) {
      if (before[name] === undefined || before[name] === "" || name in view.placeholders) continue;
      const instead = p.variables.length > 0 ? ` (it has one in ${p.variables.join(", ")})` : "";
      warnings.push(
        `${name} held ${p.id}'s key and was removed; no placeholder takes its place${instead}: a command that reads ${name} finds it unset; add ${name} to ${p.id}'s placeholder: { env: [...] } in the rule file`,
      );
    }
  }
  return { lines, warnings };
}
