// When a process started, to tie a launch to the `run` that asked for it (decision 136): a pid
// alone may be reused by another process once `run` is gone; the pid with its start time is not.
import { readFileSync } from "node:fs";

/** The start time of `pid` (clock ticks since boot, /proc/<pid>/stat field 22); undefined when gone. */
export function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces and parentheses: count from the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[19];
  } catch {
    return undefined;
  }
}
