// `clients.<name>` (docs/spec.md §16): a client's token, its providers, its role, its rate.
import * as z from "zod";
import { expect, strict } from "./messages.js";
import { providerId, role } from "./names.js";
import { credentialRefSchema } from "./values.js";

export const clientSchema = strict({
  token: credentialRefSchema.optional(),
  providers: z
    .union([z.literal("*"), z.array(providerId)], expect('"*" or a list of provider ids'))
    .optional(),
  role: role.optional(),
  /** Requests per minute the client may make (429 client_rate_limited beyond it). */
  limits: strict({
    rpm: z.number(expect("a whole number")).int("must be a whole number").min(1).max(100_000),
  }).optional(),
});
