// oidc-provider ships no types: the little of its API the tests use.
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  interface OidcContext {
    readonly body?: Record<string, unknown>;
    readonly oidc?: { readonly params?: Record<string, unknown> };
  }

  export default class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
    on(event: string, listener: (ctx: OidcContext, err?: Error) => void): this;
    readonly AccessToken: { find(value: string): Promise<unknown> };
    readonly RefreshToken: { find(value: string): Promise<unknown> };
  }
}
