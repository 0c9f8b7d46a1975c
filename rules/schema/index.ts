// The rule file (docs/spec.md §4) as zod schemas, one file per section: the validator and, through
// z.infer, the type of a parsed file. Every object is strict. The schema checks what one value
// can tell on its own; what needs the whole file (names that must exist, duplicates, the
// catalogue) is checked in cross-check.ts, and defaults are filled in compile.ts.
export {
  type ClientInput,
  type ProviderInput,
  type RuleFile,
  ruleFileSchema,
  type SourcesInput,
} from "./file.js";
export { describeValue, ruleFileErrorMap } from "./messages.js";
export { CLIENT_NAME, PROVIDER_ID, ROLES } from "./names.js";
export { schemaProblems } from "./problems.js";
export { providerSchema } from "./providers.js";
export { credentialRefSchema, mountSchema, notifySchema, upstreamSchema } from "./values.js";
