import { loadOrCreateCa } from "../../certs/ca.js";
import { formatStatus, providerStatuses, type StatusReport } from "../../proxy/status.js";
import { readPoolState } from "../../secrets/pool.js";
import { adminRequest } from "../admin-client.js";
import { COMMON_HELP, parse } from "../args.js";
import type { Command } from "../command.js";
import { createContext, findRunningBroker, localRuntime } from "../context.js";
import { readRules } from "../read-rules.js";

export const status: Command = {
  name: "status",
  help: `Usage: keybroker status [--json] [--config FILE] [--home DIR]

Shows whether a broker is running for this home, its address and CA fingerprint, and for each
provider its credentials: id, source, fingerprint (never the value), state (ok,
usage_limit_reached, invalid, missing), reset time and request count. Without a running broker
it resolves the credentials here and shows the saved pool state.

  --json           machine-readable output

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { json: { type: "boolean" } });
    const ctx = createContext(values);
    const running = await findRunningBroker(ctx.home);
    let report: StatusReport;
    if (running !== undefined) {
      report = await adminRequest<StatusReport>(ctx.home, running, "GET", "status");
    } else {
      const { rules } = readRules(ctx, values.config);
      const ca = loadOrCreateCa(ctx.home);
      const rt = await localRuntime(ctx, rules);
      report = {
        running: false,
        url: undefined,
        pid: undefined,
        ca: { path: ca.certPath, fingerprint: ca.fingerprint256 },
        rules: rules.origin,
        providers: providerStatuses(rt, readPoolState(ctx.home)),
      };
    }
    ctx.out(values.json ? JSON.stringify(report, null, 2) : formatStatus(report));
    return 0;
  },
};
