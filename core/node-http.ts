// node:http, loaded with require instead of an ES import (decision 184). An ES import of a
// builtin makes Node read every one of its exports to build the module's ES facade, and from
// Node 22 node:http has getters (`WebSocket`, `CloseEvent`, `MessageEvent`) that load Node's own
// bundled copy of undici when read: 13 MiB more resident on Node 24 (a bare process: 59.6 MiB
// against 46.3), in the broker and in every Node agent the preload goes into, for nothing. Import
// node:http's types with `import type`, and its values from here.
import { createRequire } from "node:module";

export const http: typeof import("node:http") = createRequire(import.meta.url)("node:http");
