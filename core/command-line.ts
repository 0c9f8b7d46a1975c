// Command lines written in the rule file (`cmd:` secrets, `notify:`) are split into an argv here
// and run without a shell.

/**
 * Splits a command line into an argv like a POSIX shell would, without expanding anything:
 * words split on whitespace, '...' taken literally, "..." with \" \\ \$ \` escapes, and a
 * backslash outside quotes escaping the next character.
 */
export function splitCommandLine(line: string): string[] {
  const argv: string[] = [];
  let word = "";
  let inWord = false;
  let quote: "'" | '"' | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i] as string;
    if (quote === "'") {
      if (c === "'") quote = undefined;
      else word += c;
    } else if (quote === '"') {
      const next = line[i + 1];
      if (c === '"') quote = undefined;
      else if (c === "\\" && next !== undefined && '"\\$`'.includes(next)) {
        word += next;
        i++;
      } else word += c;
    } else if (/\s/.test(c)) {
      if (inWord) argv.push(word);
      word = "";
      inWord = false;
    } else {
      inWord = true;
      const next = line[i + 1];
      if (c === "'" || c === '"') quote = c;
      else if (c === "\\" && next !== undefined) {
        word += next;
        i++;
      } else word += c;
    }
  }
  if (quote !== undefined) throw new Error(`the command line has an unterminated ${quote} quote`);
  if (inWord) argv.push(word);
  return argv;
}
