// Comparing a token someone gave with the one expected, in time that does not depend on where
// they differ.
import { timingSafeEqual } from "node:crypto";

export function sameToken(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}
