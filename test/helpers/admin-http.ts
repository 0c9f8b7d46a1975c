// The admin page spoken to as a browser would, without one: form posts and the session cookie
// (named per port, as browsers need). Every page answered is kept for the tests' secret scans.
import { request } from "undici";

export interface AdminAnswer {
  status: number;
  location: string | undefined;
  setCookie: string | undefined;
  text: string;
}

/** One request to the admin page of the broker on `port`; `form` makes it a POST. */
export async function adminRequest(
  port: number,
  path: string,
  cookie?: string,
  form?: Record<string, string>,
  pages?: string[],
): Promise<AdminAnswer> {
  const res = await request(`http://127.0.0.1:${port}${path}`, {
    method: form === undefined ? "GET" : "POST",
    headers: {
      ...(cookie === undefined ? {} : { cookie: `kb_admin_${port}=${cookie}` }),
      ...(form === undefined ? {} : { "content-type": "application/x-www-form-urlencoded" }),
    },
    ...(form === undefined ? {} : { body: new URLSearchParams(form).toString() }),
  });
  const text = await res.body.text();
  pages?.push(text);
  const header = (name: string) => {
    const v = res.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  return { status: res.statusCode, location: header("location"), setCookie: header("set-cookie"), text };
}

/** The session cookie's value in a Set-Cookie header. */
export function cookieOf(setCookie: string | undefined): string | undefined {
  return /^kb_admin_\d+=([^;]+)/.exec(setCookie ?? "")?.[1];
}

export const csrfOf = (page: string): string | undefined => /name="csrf" value="([^"]+)"/.exec(page)?.[1];
