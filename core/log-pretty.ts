// The log line a person reads on a terminal: `12:04:05.123 INFO  message key=value …`, the
// level coloured, one line per event. Turns pino's JSON line into that; anything that is not
// a JSON object passes unchanged.

const COLOURS: Record<string, number> = { trace: 90, debug: 36, info: 32, warn: 33, error: 31, fatal: 35 };

function show(value: unknown): string {
  if (typeof value === "string") return /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === "object" && value !== null && "message" in value) {
    // An error: its message is the line's business; the stack is in the JSON format.
    return JSON.stringify(String((value as { message: unknown }).message));
  }
  return JSON.stringify(value) ?? String(value);
}

export function prettyLine(json: string, colour: boolean): string {
  let event: Record<string, unknown>;
  try {
    event = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  if (typeof event !== "object" || event === null || Array.isArray(event)) return json;
  const { time, level, msg, ...fields } = event;
  const label = String(level ?? "info");
  const clock = typeof time === "string" ? time.slice(11, 23) : "";
  const tag = label.toUpperCase().padEnd(5);
  const code = COLOURS[label];
  const levelText = colour && code !== undefined ? `\u001b[${code}m${tag}\u001b[39m` : tag;
  const rest = Object.entries(fields)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${colour ? `\u001b[2m${k}=\u001b[22m` : `${k}=`}${show(v)}`);
  const text = typeof msg === "string" ? msg.replace(/\r?\n/g, " ") : "";
  return [clock, levelText, text, ...rest].filter((s) => s !== "").join(" ") + "\n";
}
