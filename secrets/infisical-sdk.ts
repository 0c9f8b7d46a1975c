// Loads @infisical/sdk, an optional dependency (79 MB with its own TypeScript and AWS SDK), on
// the first Infisical call: setups without an Infisical source never load it, and an install
// made with --omit=optional runs them all the same.
import { packageRoot } from "../core/package-root.js";

export type InfisicalSdkModule = typeof import("@infisical/sdk");
export type SdkLoader = () => Promise<InfisicalSdkModule>;

export const importInfisicalSdk: SdkLoader = () => import("@infisical/sdk");

/** The module, or an error naming the command that installs it when it is not installed. */
export async function loadInfisicalSdk(load: SdkLoader = importInfisicalSdk): Promise<InfisicalSdkModule> {
  try {
    return await load();
  } catch (err) {
    if (!isMissing(err)) throw err;
    throw new Error(
      `the Infisical source needs the optional package @infisical/sdk, which is not installed — run \`npm install @infisical/sdk\` in ${packageRoot()} (\`npm install -g @infisical/sdk\` beside a global keybroker), or remove sources.infisical from the rule file`,
      { cause: err },
    );
  }
}

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return (
    (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") &&
    String((err as Error).message).includes("@infisical/sdk")
  );
}
