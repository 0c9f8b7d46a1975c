// The little of express (a dependency of @modelcontextprotocol/sdk, without bundled types) that
// the fake MCP server uses.
declare module "express" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  export interface Request extends IncomingMessage {
    readonly hostname: string;
    readonly originalUrl: string;
    body: unknown;
  }
  export interface Response extends ServerResponse {
    status(code: number): Response;
    json(body: unknown): Response;
    redirect(status: number, url: string): void;
  }
  export type NextFunction = (err?: unknown) => void;
  export type Handler = (req: Request, res: Response, next: NextFunction) => void | Promise<void>;
  export interface Application {
    (req: IncomingMessage, res: ServerResponse): void;
    use(...handlers: unknown[]): Application;
    all(path: string, ...handlers: unknown[]): Application;
  }
  interface Express {
    (): Application;
    json(): Handler;
    urlencoded(opts: { extended: boolean }): Handler;
  }
  const express: Express;
  export default express;
}
