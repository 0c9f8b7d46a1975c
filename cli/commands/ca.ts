import { writeTrustBundle } from "../../certs/bundle.js";
import { loadOrCreateCa } from "../../certs/ca.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { refuseConfig } from "../config-flag.js";
import { createContext } from "../context.js";

export const ca: Command = {
  name: "ca",
  help: `Usage: keybroker ca path|export|bundle [--home DIR]

  path     print the path of the CA certificate ($KEYBROKER_HOME/ca/ca.pem)
  export   print the CA certificate (PEM)
  bundle   write the system roots plus the CA to $KEYBROKER_HOME/ca/bundle.pem and print its path
           (the file SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS... point to)

The CA is created on first use (folder 0700, key 0600). Only the certificate is ever printed.

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(argv, {}, true);
    const action = positionals[0];
    if (positionals.length !== 1 || !["path", "export", "bundle"].includes(action ?? "")) {
      throw new UsageError("expected one of: keybroker ca path | export | bundle");
    }
    refuseConfig(values.config, "ca", "the CA and its bundle are the home's, whatever the rules");
    const ctx = createContext(values);
    const authority = loadOrCreateCa(ctx.home);
    if (action === "path") ctx.out(authority.certPath);
    else if (action === "export") process.stdout.write(authority.certPem);
    else ctx.out(writeTrustBundle(authority, ctx.home));
    return 0;
  },
};
