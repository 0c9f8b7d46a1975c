// How the rule file's schema words its problems: the fallback error map, and the builders every
// section uses (strict objects with "did you mean", `expected <what>, got <found>`). A message
// may quote keys and enum words, never a free string value: a credential pasted into the wrong
// place must not end up in an error.
import * as z from "zod";
import { suggest, unknownKeyMessage } from "../errors.js";

export type ErrorMap = z.core.$ZodErrorMap;
export type RawIssue = z.core.$ZodRawIssue;

/** How a value found in the file is named in a message: "a number", "a list", ... */
export function describeValue(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "an empty value";
  if (Array.isArray(value)) return "a list";
  switch (typeof value) {
    case "string":
      return "a string";
    case "number":
      return "a number";
    case "boolean":
      return `${value}`;
    case "object":
      return "a map";
    default:
      return typeof value;
  }
}

export const EXPECTED_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "a whole number",
  boolean: "true or false",
  object: "a map (key: value)",
  record: "a map (key: value)",
  array: "a list",
};

export function expectedMessage(what: string, input: unknown): string {
  if (input === undefined) return `required key is missing (expected ${what})`;
  return `expected ${what}, got ${describeValue(input)}`;
}

/** The fallback message for every issue a schema does not phrase itself. */
export const ruleFileErrorMap: ErrorMap = (issue) => {
  switch (issue.code) {
    case "invalid_type":
      return expectedMessage(EXPECTED_NAMES[issue.expected] ?? issue.expected, issue.input);
    case "invalid_value": {
      const values = issue.values.map((v) => JSON.stringify(v));
      const input = issue.input;
      const shown =
        (typeof input === "string" && input.length <= 40) ||
        typeof input === "number" ||
        typeof input === "boolean"
          ? JSON.stringify(input)
          : describeValue(input);
      const close = typeof input === "string" ? suggest(input, issue.values.map(String)) : undefined;
      const hint = close === undefined ? "" : ` — did you mean "${close}"?`;
      return values.length === 1
        ? `expected ${values[0]}, got ${shown}${hint}`
        : `${shown} is not one of ${values.join(", ")}${hint}`;
    }
    case "invalid_union":
      return `expected a different kind of value, got ${describeValue(issue.input)}`;
    case "too_small":
      if (issue.origin === "string") return "must not be empty";
      if (issue.origin === "array")
        return `needs at least ${issue.minimum} entr${issue.minimum === 1 ? "y" : "ies"}`;
      return `must be at least ${issue.minimum}`;
    case "too_big":
      if (issue.origin === "string") return `is too long (at most ${issue.maximum} characters)`;
      return `must be at most ${issue.maximum}`;
    case "unrecognized_keys":
      return issue.keys.map((key) => `unknown key ${JSON.stringify(key)}`).join("\n");
    default:
      return undefined;
  }
};

/** Type errors phrased as `expected <what>, got <found>`. */
export function expect(what: string): { error: ErrorMap } {
  return {
    error: (issue: RawIssue) =>
      issue.code === "invalid_type" || issue.code === "invalid_union"
        ? expectedMessage(what, issue.input)
        : undefined,
  };
}

/**
 * A strict object: each unknown key is an issue line with a "did you mean" among the keys
 * allowed here. (One issue carries all unknown keys of the object, one per message line.)
 */
export function strict<Shape extends z.core.$ZodLooseShape>(
  shape: Shape,
  what = "a map (key: value)",
  /** Unknown keys people are known to try here, with what to write instead. */
  hints: Readonly<Record<string, string>> = {},
) {
  const allowed = Object.keys(shape);
  return z.strictObject(shape, {
    error: (issue: RawIssue) => {
      if (issue.code === "unrecognized_keys")
        return issue.keys
          .map((k) =>
            Object.hasOwn(hints, k)
              ? `unknown key ${JSON.stringify(k)} — ${hints[k]}`
              : unknownKeyMessage(k, allowed),
          )
          .join("\n");
      if (issue.code === "invalid_type") return expectedMessage(what, issue.input);
      return undefined;
    },
  });
}

export function listOf<T extends z.ZodType>(item: T, what: string) {
  return z.array(item, expect(what));
}

export function oneOrMany<T extends z.ZodType>(item: T, what: string) {
  return z.union([item, z.array(item)], expect(what));
}

/** A string checked by a parser that throws a message-bearing error. */
export function parsedString(what: string, check: (value: string) => void) {
  return z.string(expect(what)).superRefine((value, ctx) => {
    try {
      check(value);
    } catch (err) {
      ctx.addIssue(err instanceof Error ? err.message : String(err));
    }
  });
}

export function matching(pattern: RegExp, what: string, fix: string) {
  return z.string(expect(what)).regex(pattern, fix);
}
