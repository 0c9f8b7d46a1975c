// The home as the shared state (docs/spec.md §17's default): the brokers and commands of one machine
// share marks (`state/pools.json`), logins and MCP bindings (`tokens/`) through the home folder.
// Sessions and held requests stay in each broker's memory: they end with the process anyway.
import { MemoryApprovalStore } from "./approvals/memory.js";
import { HomeMarkStore } from "./marks/home.js";
import type { MarkHolder } from "./marks/store.js";
import { HomeMcpStore } from "./mcp/home.js";
import { MemorySessionStore } from "./sessions/memory.js";
import type { SharedState, StateHealth } from "./shared-state.js";
import { FileTokenStore } from "./tokens/home.js";

export class HomeState implements SharedState {
  readonly marks: HomeMarkStore;
  readonly tokens: FileTokenStore;
  readonly mcp: HomeMcpStore;
  readonly sessions = new MemorySessionStore();
  readonly approvals = new MemoryApprovalStore();

  constructor(home: string) {
    this.marks = new HomeMarkStore(home);
    this.tokens = new FileTokenStore(home);
    this.mcp = new HomeMcpStore(home);
  }

  attachPools(pools: MarkHolder): void {
    this.marks.attachPools(pools);
  }

  attachLogins(): void {
    // The token files are the logins.
  }

  health(): StateHealth {
    return { store: "home" };
  }

  async settled(): Promise<void> {}

  async close(): Promise<void> {
    this.marks.close();
  }
}
