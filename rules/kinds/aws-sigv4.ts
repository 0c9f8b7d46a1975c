// AWS Signature V4 (SPEC §9): the broker signs each request, body hash included, with the
// access key, after every other change to the request.
import { derivedEnvName } from "../provider-defaults.js";
import type { AwsSigV4Auth, ProviderRule } from "../types.js";
import type { ProviderKind } from "./kind.js";

function parts(rule: ProviderRule): readonly string[] {
  const auth = rule.auth as AwsSigV4Auth;
  return [
    auth.accessKeyId,
    auth.secretAccessKey,
    ...(auth.sessionToken === undefined ? [] : [auth.sessionToken]),
  ];
}

export const awsSigV4: ProviderKind = {
  name: "aws_sigv4",
  poolOfLogins: false,
  personLogins: false,
  boundLogins: false,
  signed: true,
  keyFromPlaceholder: false,
  wholeHost: false,
  derivedEnv: derivedEnvName,
  signingRefs: parts,
  loadRefs: parts,
  active: (resolved, total) => resolved === total,
  statusNote: () => undefined,
};
