// The secret scan of the OAuth tests: every access and refresh token the authorization server
// issued (and any other secret given) must appear nowhere the broker or the CLI wrote — their
// stdout and stderr, and every file under the home and the rule file's folder — except in the
// token store, where the tokens belong.
import { join } from "node:path";
import { findSecrets } from "./broker.js";
import type { AnyFixture } from "./in-process.js";

/** Where the tokens were found outside the token store; the tests assert this is empty. */
export function oauthLeaks(f: AnyFixture, tokens: readonly string[], more: readonly string[] = []): string[] {
  const store = join(f.home, "tokens");
  return [
    ...f.leaks(),
    ...findSecrets([...tokens, ...more], [f.home, f.dir], undefined, (file) => file.startsWith(store)),
  ];
}
