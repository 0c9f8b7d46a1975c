// One error type with stable codes (docs/spec.md §11), and the single mapping to an HTTP response.

export const ERROR_STATUS = {
  bad_request: 400,
  not_found: 404,
  request_timeout: 408,
  payload_too_large: 413,
  host_mismatch: 421,
  client_unauthorized: 407,
  placeholder_host_mismatch: 403,
  policy_denied: 403,
  approval_timeout: 403,
  reauth_required: 401,
  pool_exhausted: 429,
  client_rate_limited: 429,
  credential_unavailable: 503,
  audit_unavailable: 503,
  approvals_full: 503,
  upstream_unreachable: 502,
  upstream_tls: 502,
  upstream_timeout: 504,
  /** A bug in keybroker: logged with its stack, never described to the client (decision 99). */
  internal_error: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface BrokerErrorOptions {
  provider?: string;
  hint?: string;
  cause?: unknown;
  /** Extra response headers, e.g. `retry-after`. */
  headers?: Record<string, string>;
}

/** An error the broker answers a client with. Messages never hold secret values. */
export class BrokerError extends Error {
  readonly code: ErrorCode;
  readonly provider: string | undefined;
  readonly hint: string | undefined;
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, message: string, opts: BrokerErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "BrokerError";
    this.code = code;
    this.provider = opts.provider;
    this.hint = opts.hint;
    this.headers = opts.headers ?? {};
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }
}

/** A bad flag, argument or variable such as KEYBROKER_LOG_LEVEL (exit code 2). */
export class UsageError extends Error {
  override name = "UsageError";
}

/** A problem the user can fix from the command line (exit code 1). */
export class UserError extends Error {
  override name = "UserError";
}

/** What the client is told of a bug: nothing of the error itself (its text may hold anything). */
export function internalError(): BrokerError {
  return new BrokerError("internal_error", "internal error in keybroker; see its log", {
    hint: "report it with the broker's log line (keybroker's stderr)",
  });
}

export interface ErrorResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The one place an error becomes the JSON response of docs/spec.md §11. */
export function errorResponse(err: BrokerError): ErrorResponse {
  const error: Record<string, string> = { type: err.code, message: err.message };
  if (err.provider !== undefined) error.provider = err.provider;
  if (err.hint !== undefined) error.hint = err.hint;
  const body = JSON.stringify({ error });
  return {
    status: err.status,
    headers: {
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(body)),
      "x-keybroker-error": err.code,
      ...err.headers,
    },
    body,
  };
}
