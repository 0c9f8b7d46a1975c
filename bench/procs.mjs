// Child processes and what /proc says about them.
//
// Every child the bench starts is registered here, so that one cleanup path stops them all
// (normal end, an error, SIGINT/SIGTERM/SIGHUP), by pid, SIGTERM first and SIGKILL after a grace
// period. On a hard `process.exit` the synchronous 'exit' hook still sends SIGKILL.
import { spawn } from "node:child_process";
import fs from "node:fs";

/** USER_HZ: /proc/<pid>/stat counts CPU time in ticks of 1/100 s on Linux. */
const TICKS_PER_S = 100;

const children = new Set();

/**
 * Spawns `cmd args` and resolves once `ready(line)` returns a truthy value for a line of its
 * stdout (which is then resolved with), or rejects after `timeoutMs` or if the child exits
 * first. Stderr and stdout both go to `logFile` (so `--keep` keeps whatever V8's --trace-* flags
 * print); the last 4000 characters of stdout are also in `child.outputTail`.
 */
export function startChild({ name, cmd, args, env, logFile, ready, cwd, timeoutMs = 30_000 }) {
  const log = fs.openSync(logFile, "a");
  const child = spawn(cmd, args, {
    env,
    stdio: ["pipe", "pipe", log],
    ...(cwd === undefined ? {} : { cwd }),
  });
  fs.closeSync(log);
  child.benchName = name;
  child.outputTail = "";
  const copy = fs.createWriteStream(logFile, { flags: "a" });
  child.stdout.pipe(copy);
  children.add(child);
  child.on("exit", () => children.delete(child));
  return new Promise((resolve, reject) => {
    let buf = "";
    let done = false;
    const finish = (err, value) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve({ child, value });
    };
    const timer = setTimeout(() => finish(new Error(`${name} not ready after ${timeoutMs} ms`)), timeoutMs);
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (text) => {
      child.outputTail = (child.outputTail + text).slice(-4000);
      if (done) return;
      buf += text;
      let nl = buf.indexOf("\n");
      while (nl !== -1) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const value = ready(line);
        if (value) return finish(null, value);
        nl = buf.indexOf("\n");
      }
    });
    child.on("error", (err) => finish(err));
    child.on("exit", (code, signal) =>
      finish(new Error(`${name} exited (${signal ?? code}) before it was ready`)),
    );
  });
}

/** Stops one child: SIGTERM, then SIGKILL after `graceMs`. Resolves once it has exited. */
export function stopChild(child, graceMs = 3000) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), graceMs);
    child.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    child.stdin?.end();
    child.kill("SIGTERM");
  });
}

/** Stops every child still registered. */
export async function stopAll() {
  await Promise.all([...children].map((c) => stopChild(c)));
}

process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});

// ------------------------------------------------------------------------------- /proc readers

/** CPU seconds (user + system) the process has used so far. */
export function cpuSeconds(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name, which is in parentheses and may contain spaces.
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / TICKS_PER_S; // fields 14 (utime) and 15 (stime)
}

/**
 * The whole machine's CPU time so far, in seconds summed over all cores, from /proc/stat:
 * `busy` (everything but idle and iowait), and the part spent in interrupts and softirqs,
 * which Linux does not charge to any process (loopback TCP is largely softirq work).
 */
export function machineCpu() {
  const line = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0];
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  return {
    busy: (user + nice + system + irq + softirq + steal) / TICKS_PER_S,
    irq: (irq + softirq) / TICKS_PER_S,
  };
}

/** `{rss, hwm}` in MiB from /proc/<pid>/status: resident now and the peak so far. */
export function memoryMiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? Number.NaN);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}
