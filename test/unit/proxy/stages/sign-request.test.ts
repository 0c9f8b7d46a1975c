// signRequest: a service-account provider's request is authorized last, from the request as the
// client sent it (here SigV4, which signs locally: no token server needed).
import { describe, expect, it } from "vitest";
import { signRequest } from "../../../../proxy/stages/pick-credential.js";
import { createUpstreamAuth } from "../../../../proxy/upstream-auth.js";
import { sentHeader, testExchange, testRuntime } from "../../../helpers/exchange.js";

const RULES = `catalogue: false
providers:
  bedrock:
    mount: /p/bedrock
    upstream: https://bedrock-runtime.us-east-1.amazonaws.com
    headers: { remove: [x-debug] }
    auth:
      aws_sigv4: { region: us-east-1, service: bedrock, access_key_id: AWS_ID, secret_access_key: AWS_SECRET }
`;
const ENV = { AWS_ID: "AKIDSTAGETEST", AWS_SECRET: "stage-test-aws-secret-0123456789abcdef" };

async function bedrockExchange() {
  const rt = await testRuntime(RULES, ENV);
  const provider = rt.providers.get("bedrock")!;
  const auth = createUpstreamAuth(provider.rule, rt.resolver, () => {
    throw new Error("SigV4 needs no dispatcher");
  });
  rt.upstreamAuth.set("bedrock", auth!);
  const x = testExchange(rt, {
    mode: "reverse",
    method: "POST",
    host: "bedrock-runtime.us-east-1.amazonaws.com",
    path: "/model/m/invoke",
    headers: { authorization: "Bearer dummy", "x-debug": "1" },
    body: "{}",
  });
  x.provider = provider;
  x.body = Buffer.from("{}");
  return x;
}

describe("signRequest", () => {
  it("signs a planned request with the real key pair, after the header rules, replacing what was sent", async () => {
    const x = await bedrockExchange();
    x.injection = { headers: [...x.headers], path: x.path, sites: undefined };
    await signRequest(x);
    expect(sentHeader(x, "authorization")).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDSTAGETEST\/\d{8}\/us-east-1\/bedrock\/aws4_request, /,
    );
    expect(sentHeader(x, "x-amz-date")).toMatch(/^\d{8}T\d{6}Z$/);
    expect(sentHeader(x, "x-debug")).toBeUndefined();
    expect(x.headers.join("\n")).not.toContain(ENV.AWS_SECRET);
  });

  it("leaves a request with no planned injection as it is", async () => {
    const x = await bedrockExchange();
    await signRequest(x);
    expect(sentHeader(x, "authorization")).toBe("Bearer dummy");
  });
});
