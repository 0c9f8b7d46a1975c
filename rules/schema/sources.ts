// `sources:` (docs/spec.md §6): the lookup order, the .env file, Infisical, `cmd:` references.
import * as z from "zod";
import { listOf, matching, strict } from "./messages.js";
import {
  credentialRefSchema,
  duration,
  endpointUrl,
  filePath,
  nonEmpty,
  positiveDuration,
} from "./values.js";

export const infisicalSchema = strict({
  site_url: endpointUrl.optional(),
  project_id: nonEmpty(),
  environment: nonEmpty(),
  path: matching(/^\/[^\s]*$/, "a folder path", 'a folder path starts with "/", as in "/agents"').optional(),
  auth: strict({ client_id: credentialRefSchema, client_secret: credentialRefSchema }).optional(),
  ttl: duration.optional(),
  timeout: positiveDuration.optional(),
  grace: duration.optional(),
});

export const cmdSourceSchema = strict({
  timeout: positiveDuration.optional(),
  ttl: duration.optional(),
  grace: duration.optional(),
});

export const sourcesSchema = strict({
  order: listOf(
    z.enum(["infisical", "dotenv", "env"]),
    "a list of sources (infisical, dotenv, env)",
  ).optional(),
  dotenv: filePath.optional(),
  infisical: infisicalSchema.optional(),
  cmd: cmdSourceSchema.optional(),
});
