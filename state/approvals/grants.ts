// `--for` grants kept in a map (grant key → until, epoch ms): both stores keep theirs so, the
// request path asking memory only.

/** A grant still in force in `grants` (until, epoch ms); one that ran out is dropped. */
export function grantIn(grants: Map<string, number>, key: string, now: number): number | undefined {
  const until = grants.get(key);
  if (until === undefined) return undefined;
  if (until > now) return until;
  grants.delete(key);
  return undefined;
}
