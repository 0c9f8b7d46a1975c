export interface Command {
  readonly name: string;
  readonly help: string;
  /** Returns the exit code. Throws UsageError (exit 2) or UserError (exit 1). */
  run(argv: string[]): Promise<number>;
}
