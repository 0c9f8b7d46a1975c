// The process's initial environment block, as other processes of the user read it in
// `/proc/<pid>/environ`: the kernel shows the bytes the exec left at the top of the stack, not
// `process.env`, so deleting a variable in Node changes nothing there. keybroker overwrites the
// values of the variables that hold secrets in that block itself, after moving them to the
// heap, so that its pid keeps serving with nothing to read there (docs/decisions.md, 119).
import { closeSync, openSync, readFileSync, readSync, writeSync } from "node:fs";

/** Every variable blanked so far: the programs this process starts do not inherit them either. */
const hidden = new Set<string>();

/**
 * `env` without the variables this process blanked in its own environment: what a program it
 * starts (a `cmd:` source, `notify`) gets, so its `/proc/<pid>/environ` holds no key either.
 */
export function childEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  if (hidden.size === 0) return env;
  const out = { ...env };
  for (const name of hidden) delete out[name];
  return out;
}

/** What `blankInitialValues` did: the names blanked, or why it could not. */
export type BlankResult = { readonly blanked: string[] } | { readonly unsupported: string };

/**
 * `/proc/self/stat` fields 50 and 51 (env_start, env_end, Linux 3.5+): where the block lies.
 * The command name (field 2) is in parentheses and may hold spaces, so fields are counted after
 * its closing one, which is followed by field 3.
 */
function blockBounds(): { start: number; end: number } {
  const stat = readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const start = Number(fields[50 - 3]);
  const end = Number(fields[51 - 3]);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || end <= start) {
    throw new Error("no environment bounds in /proc/self/stat");
  }
  return { start, end };
}

/**
 * Overwrites with NUL bytes the value of every variable of `names` in this process's initial
 * environment block (Linux), so `/proc/<pid>/environ` shows `NAME=` and nothing after it.
 * `process.env` keeps each value: it is set again first, which makes libc point the variable at
 * a copy on the heap before the original bytes are cleared. Never throws; elsewhere than Linux,
 * or where `/proc/self/mem` cannot be written, it says why.
 */
export function blankInitialValues(names: ReadonlySet<string>): BlankResult {
  for (const name of names) hidden.add(name);
  if (process.platform !== "linux") return { unsupported: `not available on ${process.platform}` };
  let fd: number | undefined;
  try {
    const { start, end } = blockBounds();
    fd = openSync("/proc/self/mem", "r+");
    const block = Buffer.alloc(end - start);
    // A position given as a bigint fails with EIO on Node 20; addresses fit in a safe integer.
    readSync(fd, block, 0, block.length, start);
    const blanked = new Set<string>();
    for (let at = 0; at < block.length; ) {
      const nul = block.indexOf(0, at);
      const stop = nul === -1 ? block.length : nul;
      const eq = block.indexOf(0x3d, at);
      if (eq > at && eq < stop) {
        const name = block.toString("latin1", at, eq);
        if (names.has(name) && stop > eq + 1) {
          const value = process.env[name];
          if (value !== undefined) process.env[name] = value;
          writeSync(fd, Buffer.alloc(stop - eq - 1), 0, stop - eq - 1, start + eq + 1);
          // Had libc kept pointing at the original bytes, the variable now reads empty: set it again.
          if (value !== undefined && process.env[name] !== value) process.env[name] = value;
          blanked.add(name);
        }
      }
      at = stop + 1;
    }
    return { blanked: [...blanked].sort() };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return { unsupported: `cannot rewrite /proc/self/environ: ${e.code ?? e.message}` };
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
