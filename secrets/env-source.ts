import { fromValue, type Lookup, type SecretSource } from "./source.js";

/** The broker's own process environment. */
export class EnvSource implements SecretSource {
  readonly name = "env";
  constructor(private readonly env: NodeJS.ProcessEnv = process.env) {}

  async lookup(key: string): Promise<Lookup> {
    return fromValue(this.env[key]);
  }
}
