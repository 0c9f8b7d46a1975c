// The names the rule file gives: provider ids, client names, roles (docs/spec.md §16).
import * as z from "zod";
import { expect, matching } from "./messages.js";

export const PROVIDER_ID = /^[a-z][a-z0-9._-]{0,62}$/;
export const CLIENT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
/** docs/spec.md §16: what a client may do, from everything (owner) to safe methods only (guest). */
export const ROLES = ["owner", "admin", "user", "guest"] as const;
export const role = z.enum(ROLES, expect(`a role: ${ROLES.join(", ")}`));
export const clientName = matching(
  CLIENT_NAME,
  "a client name",
  "is not a valid client name — use letters, digits, '.', '_' or '-'",
);

export const providerId = matching(
  PROVIDER_ID,
  "a provider id",
  "is not a valid provider id — use lower-case letters, digits, '-', '_' or '.', starting with a letter",
);
