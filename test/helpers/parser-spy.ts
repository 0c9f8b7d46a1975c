// Counts how often node's llhttp binding is initialized (decision 204: a head that comes whole
// is parsed on the parser the connection has, and only a head in pieces gets a fresh one).
import { HTTPParser } from "../../proxy/upstream-h1-wire.js";

export interface InitializeSpy {
  /** Calls of `initialize` on any parser since the spy was set. */
  readonly calls: () => number;
  /** Puts node's method back. */
  readonly restore: () => void;
}

export function spyParserInitialize(): InitializeSpy {
  const P = HTTPParser!;
  const init = P.prototype.initialize;
  let calls = 0;
  P.prototype.initialize = function (this: typeof P.prototype, ...a: Parameters<typeof init>) {
    calls++;
    return init.apply(this, a);
  };
  return {
    calls: () => calls,
    restore: () => {
      P.prototype.initialize = init;
    },
  };
}
