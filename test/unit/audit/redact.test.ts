import { Readable } from "node:stream";
import { text as streamText } from "node:stream/consumers";
import { describe, expect, it } from "vitest";
import { classifyName, createRedactStream, MASK, redactText } from "../../../audit/redact.js";

// One golden case per pattern: input line → expected line.
const GOLDEN: readonly (readonly [string, string, string])[] = [
  ["openai", "key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7cD0eF, then", "key sk-[REDACTED], then"],
  ["openai, dots inside", "sk-or-v1.Ab3dEf6hIj9kLm2n.Op5qRs8tUv1wXy4z.", "sk-[REDACTED]."],
  [
    "anthropic",
    "ANTHROPIC: sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE-AbCdEf_gh",
    "ANTHROPIC: sk-ant-[REDACTED]",
  ],
  ["github classic", "token ghp_16C7e42F292c6912E7710c838347Ae178B4a here", "token ghp_[REDACTED] here"],
  ["github oauth", "gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_[REDACTED]"],
  ["github user-to-server", "ghu_16C7e42F292c6912E7710c838347Ae178B4a", "ghu_[REDACTED]"],
  ["github server-to-server", "ghs_16C7e42F292c6912E7710c838347Ae178B4a", "ghs_[REDACTED]"],
  ["github refresh", "ghr_16C7e42F292c6912E7710c838347Ae178B4a", "ghr_[REDACTED]"],
  [
    "github fine-grained",
    "github_pat_11ABCDEFG0123456789abc_defghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV0123",
    "github_pat_[REDACTED]",
  ],
  ["gitlab", "glpat-xY3zA9bC7dE5fG1hI2jK", "glpat-[REDACTED]"],
  ["gitlab deploy", "gldt-xY3zA9bC7dE5fG1hI2jK4", "gldt-[REDACTED]"],
  ["slack bot", "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "xoxb-[REDACTED]"],
  ["slack user", "xoxp-1234567890-1234567890", "xoxp-[REDACTED]"],
  ["slack app", "xapp-1-A0123456789-1234567890123-abcdef0123456789", "xapp-[REDACTED]"],
  ["google", "?key=AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW&alt=sse", "?key=AIza[REDACTED]&alt=sse"],
  ["aws access key id", "aws_access_key_id AKIAIOSFODNN7EXAMPLE", "aws_access_key_id AKIA[REDACTED]"],
  [
    "aws secret by context",
    "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "aws configure set aws_secret_access_key [REDACTED]",
  ],
  [
    "aws secret in CLI JSON",
    '"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",',
    '"SecretAccessKey": "[REDACTED]",',
  ],
  ["stripe live", "sk_live_51H8bQ2Cx7yZ9aB3cD4eF5gH6i", "sk_live_[REDACTED]"],
  ["stripe restricted", "rk_live_51H8bQ2Cx7yZ9aB3cD4eF5gH6i", "rk_live_[REDACTED]"],
  [
    "sendgrid, three segments",
    "SENDGRID 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 end",
    "SENDGRID SG.[REDACTED] end",
  ],
  ["hugging face", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "hf_[REDACTED]"],
  ["replicate", "r8_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "r8_[REDACTED]"],
  [
    "npm",
    "//registry.npmjs.org/:_authToken=npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "//registry.npmjs.org/:_authToken=npm_[REDACTED]",
  ],
  [
    "pypi",
    "pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAACKlsz",
    "pypi-[REDACTED]",
  ],
  [
    "jwt",
    "id_token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
    "id_token [REDACTED] ok",
  ],
  [
    "pem inline (JSON-escaped)",
    '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n"',
    '"private_key": "-----BEGIN PRIVATE KEY-----[REDACTED]-----END PRIVATE KEY-----\\n"',
  ],
  [
    "authorization header (curl)",
    `curl -H "Authorization: Bearer abc123DEF456ghi789" https://api.example.com`,
    `curl -H "Authorization: Bearer [REDACTED]" https://api.example.com`,
  ],
  ["authorization basic", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]"],
  [
    "proxy-authorization",
    "Proxy-Authorization: Basic Y3Jvbjp0b2tlbjEyMw==",
    "Proxy-Authorization: Basic [REDACTED]",
  ],
  ["x-api-key", "-H 'x-api-key: 7f3a9c1e5b2d4f60a8e1c3b5'", "-H 'x-api-key: [REDACTED]'"],
  ["api-key (azure)", "api-key: 0123456789abcdef0123456789abcdef", "api-key: [REDACTED]"],
  ["x-goog-api-key json", '{"x-goog-api-key": "Gk9xQ2wE8rT4yU6iO1pA"}', '{"x-goog-api-key": "[REDACTED]"}'],
  [
    "sigv4 authorization",
    "Authorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/bedrock/aws4_request, Signature=abc",
    "Authorization: AWS4-HMAC-SHA256 [REDACTED]",
  ],
  ["env KEY=", "export MISTRAL_API_KEY=Zx9yW8vU7tS6rQ5pO4nM3lK2", "export MISTRAL_API_KEY=[REDACTED]"],
  ["env TOKEN= quoted", 'SLACK_BOT_TOKEN="t0k3n-value-with-digits"', 'SLACK_BOT_TOKEN="[REDACTED]"'],
  ["env SECRET=", "CLIENT_SECRET=s3cr3t", "CLIENT_SECRET=[REDACTED]"],
  ["env PASSWORD= (any value)", "DB_PASSWORD=changeme", "DB_PASSWORD=[REDACTED]"],
  ["yaml password", "  password: hunter2", "  password: [REDACTED]"],
  ["yaml token", "- token: 'abcDEF123456'", "- token: '[REDACTED]'"],
  ["json password", '{"user": "app", "password": "changeme"}', '{"user": "app", "password": "[REDACTED]"}'],
  ["json apiKey", '{"apiKey":"Zx9yW8vU7tS6rQ5p"}', '{"apiKey":"[REDACTED]"}'],
  [
    "escaped json in a log",
    '"body":"{\\"access_token\\":\\"abcDEF123456\\"}"',
    '"body":"{\\"access_token\\":\\"[REDACTED]\\"}"',
  ],
  ["cli flag", "mysql --password=Sup3rS3cret db", "mysql --password=[REDACTED] db"],
  [
    "url password",
    "git clone https://x-access-token:v1.abc123def456@github.com/o/r",
    "git clone https://x-access-token:[REDACTED]@github.com/o/r",
  ],
  [
    "connection string",
    "DATABASE_URL=postgres://app:pa55-w0rd@db.internal:5432/app",
    "DATABASE_URL=postgres://app:[REDACTED]@db.internal:5432/app",
  ],
  [
    "mongodb+srv",
    "mongodb+srv://admin:Tr1cky%40pw@cluster0.mongodb.net/",
    "mongodb+srv://admin:[REDACTED]@cluster0.mongodb.net/",
  ],
  [
    "ado.net connection string",
    "Server=db;User Id=sa;Password=Sup3r;Encrypt=true",
    "Server=db;User Id=sa;Password=[REDACTED];Encrypt=true",
  ],
];

describe("redactText: one golden case per pattern", () => {
  for (const [name, input, expected] of GOLDEN) {
    it(name, () => {
      expect(redactText(input)).toBe(expected);
    });
  }
});

describe("three-segment keys", () => {
  it("masks SG.<id>.<secret> whole: no character of either segment remains", () => {
    const id = "ngeVfQFYQlKU0ufo8x5d1A";
    const secret = "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr";
    for (const input of [
      `SG.${id}.${secret}`,
      `"SENDGRID_API_KEY": "SG.${id}.${secret}"`,
      `key=SG.${id}.${secret}.`,
    ]) {
      const out = redactText(input);
      const rest = out.replace(/SENDGRID_API_KEY|SG\.|\[REDACTED\]|key=|["\s:.]/g, "");
      expect(rest, out).toBe("");
      for (let i = 0; i + 3 <= id.length; i++) expect(out).not.toContain(id.slice(i, i + 3));
      for (let i = 0; i + 3 <= secret.length; i++) expect(out).not.toContain(secret.slice(i, i + 3));
    }
  });
});

describe("PEM private keys", () => {
  it("masks a multi-line block, keeping its BEGIN and END lines", () => {
    const input = [
      "key file:",
      "-----BEGIN RSA PRIVATE KEY-----",
      "MIIEowIBAAKCAQEAv0a1b2c3d4e5f6g7h8i9j0k",
      "l1m2n3o4p5q6r7s8t9u0v1w2x3y4z5A6B7C8D9E",
      "-----END RSA PRIVATE KEY-----",
      "done",
    ].join("\n");
    expect(redactText(input)).toBe(
      ["key file:", "-----BEGIN RSA PRIVATE KEY-----", MASK, "-----END RSA PRIVATE KEY-----", "done"].join(
        "\n",
      ),
    );
  });

  it("masks OpenSSH and PGP blocks, and leaves public keys and certificates alone", () => {
    const ssh =
      "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";
    expect(redactText(ssh)).not.toContain("b3BlbnNzaC1rZXktdjEAAAAA");
    const pgp =
      "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0wE3ABCAC\n-----END PGP PRIVATE KEY BLOCK-----";
    expect(redactText(pgp)).not.toContain("lQOYBF0wE3ABCAC");
    const cert = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----";
    expect(redactText(cert)).toBe(cert);
  });
});

describe("known values", () => {
  // A value no pattern would recognize: only the configured sources know it is a secret.
  const value = "correct/horse+battery staple";

  it("masks the raw, JSON-escaped, URL-encoded and base64 forms of a known value", () => {
    const input = [
      `echo ${value}`,
      JSON.stringify({ v: value }),
      `?q=${encodeURIComponent(value)}`,
      Buffer.from(`user:${value}`).toString("base64"),
    ].join("\n");
    const out = redactText(input, [value]);
    for (const form of [value, encodeURIComponent(value), JSON.stringify(value).slice(1, -1)]) {
      expect(out).not.toContain(form);
    }
    expect(out.split("\n")[0]).toBe("echo [REDACTED]");
    expect(out.split("\n")[3]).toContain(MASK);
    expect(redactText(input)).toBe(input);
  });

  it("masks each key-material line of a multi-line known value", () => {
    const pem = "-----BEGIN EC KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk\n-----END EC KEY-----\n";
    expect(redactText("line MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk", [pem])).toBe("line [REDACTED]");
  });
});

describe("false positives: left alone", () => {
  const untouched = [
    "commit 3f2c1e8d9b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e (HEAD -> main)",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "request 123e4567-e89b-12d3-a456-426614174000 done",
    '{"idempotency_key": "123e4567-e89b-12d3-a456-426614174000", "key": "user_id"}',
    '{"cache_key": "a1b2c3d4e5f6a7b8c9d0", "sort_key": "created_at"}',
    "aGVsbG8gd29ybGQsIHRoaXMgaXMgbm90IGEgc2VjcmV0Cg==",
    "The password: required for login. Secret: the plan is to ship on Friday.",
    "Set your authorization header and the api-key parameter before you start.",
    "This is a task-force-planning-document for the risk-assessment workshop.",
    '{"usage": {"max_tokens": 1024, "input_tokens": 12, "next_page_token": "CiAKGjBpNDd2Nmp"}}',
    "Authorization: Bearer $OPENAI_API_KEY",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell variable reference, on purpose
    'OPENAI_API_KEY="${OPENAI_API_KEY}"',
    "const token = getToken(); password = os.environ['DB_PASSWORD']",
    "api_key = process.env.OPENAI_API_KEY",
    "export OPENAI_API_KEY=sk-kb-kbph-0123456789ABCDEFGHIJabcdefghijkl",
    "x-api-key: sk-ant-kb-kbph-0123456789ABCDEFGHIJabcdefghijkl",
    "already DB_PASSWORD=[REDACTED] and sk-ant-[REDACTED]",
    "https://example.com/path?q=1#frag and http://127.0.0.1:8899/p/vertex",
    "日本語のテキスト — ünïcödé prose stays.",
  ];
  for (const line of untouched) {
    it(line.slice(0, 60), () => {
      expect(redactText(line)).toBe(line);
    });
  }
});

describe("classifyName", () => {
  it("tells secret names from ordinary ones", () => {
    for (const n of [
      "OPENAI_API_KEY",
      "client_secret",
      "DB_PASSWORD",
      "accessToken",
      "SecretAccessKey",
      "private_key",
    ]) {
      expect(classifyName(n), n).toBe("strong");
    }
    expect(classifyName("key")).toBe("medium");
    expect(classifyName("GEMINI_KEY")).toBe("medium");
    for (const n of [
      "sort_key",
      "idempotencyKey",
      "max_tokens",
      "next_page_token",
      "username",
      "public_key",
    ]) {
      expect(classifyName(n), n).toBeUndefined();
    }
  });
});

describe("createRedactStream", () => {
  const input = [
    "user: run the tests",
    `export OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7cD0eF`,
    "-----BEGIN PRIVATE KEY-----",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC",
    "-----END PRIVATE KEY-----",
    "ünïcödé 日本語 🎉 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",
    "no newline at the end",
  ].join("\n");

  it("gives the same output as redactText whatever the chunking, UTF-8 splits included", async () => {
    const expected = redactText(input, ["run the tests"]);
    const bytes = Buffer.from(input);
    for (const size of [1, 2, 3, 7, 64, bytes.length]) {
      const chunks: Buffer[] = [];
      for (let i = 0; i < bytes.length; i += size) chunks.push(bytes.subarray(i, i + size));
      const out = await streamText(Readable.from(chunks).pipe(createRedactStream(["run the tests"])));
      expect(out, `chunks of ${size}`).toBe(expected);
    }
    expect(expected).toContain("user: [REDACTED]");
    expect(expected).not.toContain("MIIEvQ");
    expect(expected.endsWith("no newline at the end")).toBe(true);
  });

  it("emits each line as soon as it is complete", async () => {
    const stream = createRedactStream();
    const first = new Promise<string>((resolve) => stream.once("data", (d: Buffer) => resolve(d.toString())));
    stream.write("DB_PASSWORD=hunter2\nsecond line without its newline yet");
    expect(await first).toBe("DB_PASSWORD=[REDACTED]\n");
    stream.end();
  });
});
