// AWS Signature V4 (docs/spec.md §9): the broker signs each request, body hash included, with the
// access key, after every other change to the request.
import type { ProviderRule } from "../types.js";
import type { ProviderKind } from "./kind.js";
import { signerKind } from "./signer.js";

function parts(rule: ProviderRule): readonly string[] {
  if (rule.kind !== "aws_sigv4") return [];
  const auth = rule.auth;
  return [
    auth.accessKeyId,
    auth.secretAccessKey,
    ...(auth.sessionToken === undefined ? [] : [auth.sessionToken]),
  ];
}

export const awsSigV4: ProviderKind = signerKind("aws_sigv4", parts);
