// Broker configurations ("variants") the throughput scenario runs against.
//
// A variant is a name plus two YAML snippets that bench/broker.mjs adds to the rule file:
//   top       lines added at the top level of the rule file (column 0)
//   provider  lines added inside every benchmark provider entry (indent is added for you)
// Snippets are plain YAML text; flow style (`audit: { enabled: false }`) keeps them to one line.
//
// With only `default` listed, throughput runs once (in the main comparison). With more, every
// variant, `default` included, gets a fresh broker and the same warm-up and measurement, one
// after the other, and the report adds a table comparing them with `default`.
// `node bench/run.mjs --variants default,audit-off` picks some by name.
export const VARIANTS = [
  { name: "default", top: "", provider: "", note: "rule file as bench/peer-extra.sh writes it" },

  // ---------------------------------------------------------------------------------------
  // ADD VARIANTS HERE once scrubbing and the audit log are wired into the broker (SPEC §12,
  // §3.5): uncomment or copy the entries below, using the keys the rule-file schema accepts
  // (rules/schema.ts). A variant the broker rejects is reported as skipped, not fatal.
  //
  // { name: "audit-off", top: "audit: { enabled: false }", provider: "" },
  // { name: "scrub-off", top: "", provider: "scrub: false" },
  // { name: "audit-off+scrub-off", top: "audit: { enabled: false }", provider: "scrub: false" },
  // ---------------------------------------------------------------------------------------
];
