// Broker configurations ("variants") the throughput scenario runs against.
//
// A variant is a name plus two YAML snippets that bench/broker.mjs adds to the rule file:
//   top       lines added at the top level of the rule file (column 0)
//   provider  lines added inside every benchmark provider entry (indent is added for you)
// Snippets are plain YAML text; flow style (`audit: { enabled: false }`) keeps them to one line.
// Optional: `scrape` (bench/instructions.mjs asks /metrics once before it counts), `oauth` (the providers authenticate with a stored OAuth login whose access token is
// the bench key, in place of the key itself), `nodeOptions` (the broker's node flags, in place of --node-options), `env` (extra
// environment variables for the broker) and `optIn` (run only when named in --variants, so
// that `npm run bench` stays within a few minutes).
//
// With only `default` listed, throughput runs once (in the main comparison). With more, every
// variant, `default` included, gets a fresh broker and the same warm-up and measurement, one
// after the other, and the report adds a table comparing them with `default`.
// `node bench/run.mjs --variants default,audit-off` picks some by name.
import { V8_FLAGS } from "../dist/core/v8-tuning.js";

export const VARIANTS = [
  { name: "default", top: "", provider: "", note: "rule file as bench/peer-extra.sh writes it" },

  // The cost of the audit log and of response scrubbing: the same broker with each turned off.
  { name: "audit-off", top: "audit: { enabled: false }", provider: "", note: "no audit log" },
  { name: "scrub-off", top: "scrub: { responses: false }", provider: "", note: "responses not scrubbed" },
  {
    name: "audit-off+scrub-off",
    top: "audit: { enabled: false }\nscrub: { responses: false }",
    provider: "",
    note: "neither",
  },

  // What a configured broker pays per request, not only an empty rule file: clients with roles,
  // a policy whose rules (deny, approve, a role-scoped deny) are all tried and none matches, the
  // audit log, and /metrics scraped (bench/instructions.mjs asks it once; `scrape`). No rate
  // limit: the highest a rule file may set (100,000 a minute) is below what the throughput step
  // sends (about 800,000 a minute here), so it would answer 429 and the run would be invalid.
  {
    name: "realistic",
    optIn: true,
    top: [
      "clients:",
      '  default: { providers: "*", role: user }',
      "  reader: { providers: [bench], role: guest }",
      "  phone: { role: admin }",
    ].join("\n"),
    provider: [
      "policy:",
      '  - deny: { method: DELETE, path: "/v1/files/**" }',
      '  - approve: { method: [PUT, PATCH], path: "/v1/fine_tuning/**", timeout: 5m }',
      '  - deny: { method: POST, path: "/v1/chat/**", roles: [guest] }',
    ].join("\n"),
    scrape: true,
    note: "roles, a three-rule policy, audit log, /metrics scraped",
  },

  // OAuth custody on the request path: the key injected as a stored login's access token
  // (no store read, lock or refresh per request while the token is fresh, docs/spec.md §8).
  {
    name: "oauth",
    oauth: true,
    top: "",
    provider: "",
    note: "OAuth login's access token injected instead of an API key",
  },

  // The memory settings (core/v8-tuning.ts and the flags `npm start` passes), against `default`.
  {
    name: "untuned",
    top: "",
    provider: "",
    nodeOptions: [],
    env: { KEYBROKER_V8_TUNING: "off" },
    note: "node's defaults: no flags, no V8 tuning",
  },
  {
    name: "node-snapshot",
    optIn: true,
    top: "",
    provider: "",
    nodeOptions: ["--max-semi-space-size=2", "--single-threaded-gc"],
    note: "node's own start-up snapshot, as node starts by default (decision 197)",
  },
  {
    name: "parallel-gc",
    optIn: true,
    top: "",
    provider: "",
    nodeOptions: ["--max-semi-space-size=2", "--no-node-snapshot"],
    note: "without --single-threaded-gc",
  },
  {
    name: "semi-1",
    optIn: true,
    top: "",
    provider: "",
    nodeOptions: ["--max-semi-space-size=1", "--single-threaded-gc", "--no-node-snapshot"],
    note: "a young generation half as large",
  },
  {
    name: "semi-4",
    optIn: true,
    top: "",
    provider: "",
    nodeOptions: ["--max-semi-space-size=4", "--single-threaded-gc", "--no-node-snapshot"],
    note: "a young generation twice as large (what `3` got: V8 rounds it up to a power of two)",
  },
  {
    name: "single-threaded",
    optIn: true,
    top: "",
    provider: "",
    nodeOptions: [
      "--max-semi-space-size=2",
      "--single-threaded-gc",
      "--single-threaded",
      "--no-node-snapshot",
    ],
    note: "no background compiling either (compiler threads' allocator arenas)",
  },
  {
    name: "turbofan-llhttp",
    optIn: true,
    top: "",
    provider: "",
    env: { KEYBROKER_V8_FLAGS: V8_FLAGS.filter((f) => f !== "--liftoff-only").join(" ") },
    note: "without --liftoff-only",
  },
  {
    name: "no-size-mode",
    optIn: true,
    top: "",
    provider: "",
    env: { KEYBROKER_V8_FLAGS: V8_FLAGS.filter((f) => f !== "--optimize-for-size").join(" ") },
    note: "without V8's memory-saving mode (--optimize-for-size, decision 194)",
  },
  // Fleet mode (docs/spec.md §17): marks and logins on Redis, the request path still in memory.
  // bench/run.mjs starts a redis-server for it and writes its URL into `top`.
  {
    name: "fleet-redis",
    optIn: true,
    redis: true,
    top: "",
    provider: "",
    note: "state: redis:// on a local redis-server",
  },
  // The load generated by a process of its own that `keybroker run --no-isolate` starts: what
  // `isolated` compares with, as both have the client in another process than the bench's.
  {
    name: "launched",
    optIn: true,
    launched: true,
    top: "",
    provider: "",
    note: "load generated by a plain launch (run --no-isolate)",
  },
  // `keybroker run --isolate` (decision 115): the load generated inside an isolated launch, as
  // an agent there; also times a launch (bench/isolated.mjs). Linux only.
  {
    name: "isolated",
    optIn: true,
    isolated: true,
    top: "",
    provider: "",
    note: "load generated inside an isolated launch",
  },
  // glibc's malloc: 16 KiB blocks (OpenSSL's record buffers) in their own mappings. Less memory
  // per idle connection, one page fault more per request (docs/performance.md).
  {
    name: "mmap-16k",
    optIn: true,
    top: "",
    provider: "",
    env: { MALLOC_MMAP_THRESHOLD_: "16384" },
    note: "glibc malloc: blocks of 16 KiB and more get their own mapping",
  },
];
