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

/** A lookup table over ASCII of the characters `re` matches. */
function asciiTable(re: RegExp): Uint8Array {
  const table = new Uint8Array(128);
  for (let c = 0; c < 128; c++) table[c] = re.test(String.fromCharCode(c)) ? 1 : 0;
  return table;
}

/** RFC 3986 unreserved characters: their escapes mean the character itself. */
const UNRESERVED = asciiTable(/[A-Za-z0-9\-._~]/);
/** What a path keeps literally: unreserved, sub-delimiters but ';', ':', '@' and '/'. */
const KEPT = asciiTable(/[A-Za-z0-9\-._~!$&'()*+,=:@/]/);

const utf8 = new TextDecoder("utf-8", { fatal: true });

function percentEscape(byte: number): string {
  return `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
}

function hexDigit(code: number): number {
  if (code >= 48 && code <= 57) return code - 48;
  const lower = code | 0x20;
  return lower >= 97 && lower <= 102 ? lower - 87 : -1;
}

/** The byte of the two hex digits at `at`, or undefined. */
function hexValue(raw: string, at: number): number | undefined {
  const hi = hexDigit(raw.charCodeAt(at));
  const lo = hexDigit(raw.charCodeAt(at + 1));
  return hi < 0 || lo < 0 ? undefined : (hi << 4) | lo;
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
  // Characters from `plain` up to `i` are kept as they are, and copied in one slice.
  let plain = 0;
  for (let i = 0; i < raw.length; ) {
    const code = raw.charCodeAt(i);
    if (code < 128 && KEPT[code] === 1) {
      i++;
      continue;
    }
    out += raw.slice(plain, i);
    if (code === 0x25) {
      const byte = hexValue(raw, i + 1);
      if (byte === undefined) return INVALID_ESCAPE;
      if (byte >= 0x80) {
        // A run of escaped bytes: one UTF-8 sequence or more, checked whole.
        const bytes: number[] = [];
        let b: number | undefined = byte;
        while (b !== undefined && b >= 0x80) {
          bytes.push(b);
          i += 3;
          b = raw.charCodeAt(i) === 0x25 ? hexValue(raw, i + 1) : undefined;
        }
        try {
          utf8.decode(Uint8Array.from(bytes));
        } catch {
          return BAD_UTF8;
        }
        for (const x of bytes) out += percentEscape(x);
      } else {
        i += 3;
        if (UNRESERVED[byte] === 1) out += String.fromCharCode(byte);
        else if (byte === 0x2f) return ENCODED_SLASH;
        else if (byte === 0x5c) return ENCODED_BACKSLASH;
        else if (byte === 0x3b) return MATRIX;
        else if (byte < 0x20 || byte === 0x7f) return CONTROL;
        else if (byte === 0x25 && hexValue(raw, i) !== undefined) return DOUBLE_ESCAPE;
        else out += percentEscape(byte);
      }
    } else {
      i++;
      if (code === 0x5c) return BACKSLASH;
      if (code === 0x3b) return MATRIX;
      if (code <= 0x20 || code >= 0x7f) return BAD_CHARACTER;
      out += percentEscape(code); // " # < > [ ] ^ ` { | }: escaped, so every server reads them as data
    }
    plain = i;
  }
  // Nothing escaped or decoded, no empty or dot segment: the path is its own canonical form
  // (the usual case, without the split and join below).
  if (plain === 0 && raw.charCodeAt(0) === 0x2f && !raw.includes("//") && !raw.includes("/."))
    return { path: raw };
  out += raw.slice(plain);
  return { path: removeDotSegments(out) };
}

/** Merges repeated slashes and resolves `.` and `..`; a path ending in one keeps its last '/'. */
export function removeDotSegments(path: string): string {
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
