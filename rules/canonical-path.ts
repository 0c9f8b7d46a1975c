// The one form of a request path that policy matches and that is forwarded (decision 101):
// escapes of unreserved characters decoded, other escapes upper-cased, characters a path may
// not hold literally escaped, repeated slashes merged, dot-segments removed. A path with more
// than one reading (servers that decode, split or strip it differently) has none (decision 102).

/** Why a path has no canonical form: what is wrong, and what the client can do. */
export interface PathProblem {
  readonly problem: string;
  readonly fix: string;
}

export type CanonicalPath = { readonly path: string } | PathProblem;

const HEX = "0123456789ABCDEF";
/** RFC 3986 unreserved characters: their escapes mean the character itself. */
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;
/** What a path segment may hold literally besides unreserved characters (pchar, minus ';'). */
const SEGMENT_DELIMS = /^[!$&'()*+,=:@]$/;

const utf8 = new TextDecoder("utf-8", { fatal: true });

function percentEscape(byte: number): string {
  return `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
}

function hexValue(raw: string, at: number): number | undefined {
  const pair = raw.slice(at, at + 2);
  return /^[0-9A-Fa-f]{2}$/.test(pair) ? Number.parseInt(pair, 16) : undefined;
}

const INVALID_ESCAPE: PathProblem = {
  problem: "an invalid percent-escape ('%' not followed by two hex digits)",
  fix: "write a literal '%' as %25",
};
const DOUBLE_ESCAPE: PathProblem = {
  problem:
    "an escaped escape (%25 followed by two hex digits), which a server behind a gateway may decode twice",
  fix: "send the character itself or its single escape",
};
const BAD_UTF8: PathProblem = {
  problem: "escapes that are not valid UTF-8 (an overlong, truncated or out-of-range sequence)",
  fix: "escape each character as the bytes of its shortest UTF-8 form (é is %C3%A9)",
};
const BACKSLASH: PathProblem = {
  problem: "a backslash, which some servers read as '/'",
  fix: "separate segments with '/'; a name with a backslash cannot be sent to this provider",
};
const ENCODED_SLASH: PathProblem = {
  problem: "an encoded '/' (%2F), which some servers read as a separator and others as data",
  fix: "address the resource by a path without %2F (for example by its numeric id)",
};
const ENCODED_BACKSLASH: PathProblem = {
  problem: "an encoded backslash (%5C), which some servers read as '/'",
  fix: "separate segments with '/'; a name with a backslash cannot be sent to this provider",
};
const CONTROL: PathProblem = {
  problem: "an encoded NUL or control character (%00-%1F, %7F)",
  fix: "remove the control character from the path",
};
const MATRIX: PathProblem = {
  problem: "a ';' (a matrix parameter), which some servers strip with what follows it and others keep",
  fix: "remove the ';' parameters from the path; send them in the query instead",
};
const BAD_CHARACTER: PathProblem = {
  problem: "a character that is not allowed in a request path",
  fix: "percent-encode it",
};

/**
 * The canonical form of `raw`, a path without its query, or why it has none. Escapes of
 * bytes at or above 0x80 stay escaped (upper-case) and must spell valid UTF-8 in runs.
 */
export function canonicalPath(raw: string): CanonicalPath {
  let out = "";
  for (let i = 0; i < raw.length; ) {
    const c = raw[i]!;
    const code = raw.charCodeAt(i);
    if (c === "%") {
      const byte = hexValue(raw, i + 1);
      if (byte === undefined) return INVALID_ESCAPE;
      if (byte >= 0x80) {
        // A run of escaped bytes: one UTF-8 sequence or more, checked whole.
        const bytes: number[] = [];
        let b: number | undefined = byte;
        while (b !== undefined && b >= 0x80) {
          bytes.push(b);
          i += 3;
          b = raw[i] === "%" ? hexValue(raw, i + 1) : undefined;
        }
        try {
          utf8.decode(Uint8Array.from(bytes));
        } catch {
          return BAD_UTF8;
        }
        for (const x of bytes) out += percentEscape(x);
        continue;
      }
      i += 3;
      const ch = String.fromCharCode(byte);
      if (UNRESERVED.test(ch)) out += ch;
      else if (ch === "/") return ENCODED_SLASH;
      else if (ch === "\\") return ENCODED_BACKSLASH;
      else if (ch === ";") return MATRIX;
      else if (byte < 0x20 || byte === 0x7f) return CONTROL;
      else if (ch === "%" && hexValue(raw, i) !== undefined) return DOUBLE_ESCAPE;
      else out += percentEscape(byte);
      continue;
    }
    i++;
    if (c === "\\") return BACKSLASH;
    if (c === ";") return MATRIX;
    if (code <= 0x20 || code >= 0x7f) return BAD_CHARACTER;
    if (c === "/" || UNRESERVED.test(c) || SEGMENT_DELIMS.test(c)) out += c;
    else out += percentEscape(code); // " # < > [ ] ^ ` { | }: escaped, so every server reads them as data
  }
  return { path: removeDotSegments(out) };
}

/** Merges repeated slashes and resolves `.` and `..`; a path ending in one keeps its last '/'. */
function removeDotSegments(path: string): string {
  const kept: string[] = [];
  const segments = path.split("/");
  for (const segment of segments) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") kept.pop();
    else kept.push(segment);
  }
  const last = segments.at(-1);
  const trailing = kept.length > 0 && (last === "" || last === "." || last === "..");
  return `/${kept.join("/")}${trailing ? "/" : ""}`;
}
