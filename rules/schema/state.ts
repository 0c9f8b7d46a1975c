// `state:` (docs/spec.md §17): where the shared state of a fleet lives.
import * as z from "zod";
import { checkUrl, noPassword, noQueryOrFragment, pathMatching, scheme, someHost } from "../url.js";
import { expect, matching, parsedString, strict } from "./messages.js";
import { credentialRefSchema } from "./values.js";

/** `state: redis://…`: a Redis URL, without a password in it (that is a credential reference). */
export const redisUrl = parsedString("a redis:// or rediss:// URL", (value) => {
  checkUrl(value, 'write "redis://host:6379/0" or "rediss://host:6380/0"', [
    scheme(
      (url) => url.protocol === "redis:" || url.protocol === "rediss:",
      'must be a redis:// or rediss:// URL, as in "redis://127.0.0.1:6379/0"',
    ),
    someHost('names no host — write "redis://host:6379/0"'),
    noPassword("must not carry a password — write state: { url, password: <credential reference> }"),
    noQueryOrFragment("takes no query or fragment"),
    pathMatching(/^\/?(\d{1,2})?$/, 'the path is a database number, as in "/0"'),
  ]);
});

/** docs/spec.md §17: where the shared state of a fleet lives (default: the home, one broker). */
export const stateSchema = z.union(
  [
    redisUrl,
    strict(
      {
        url: redisUrl,
        password: credentialRefSchema.optional(),
        prefix: matching(
          /^[A-Za-z0-9:._-]{1,64}$/,
          "a key prefix",
          'a prefix is up to 64 letters, digits, ":", ".", "_" or "-", as in "keybroker:"',
        ).optional(),
      },
      undefined,
      Object.fromEntries(
        ["ca", "tls", "ca_file", "cacert"].map((k) => [
          k,
          "a rediss:// server is verified with the system's roots plus the files in upstream_ca: list its CA there",
        ]),
      ),
    ),
  ],
  expect("a redis:// URL, or { url, password, prefix }"),
);
