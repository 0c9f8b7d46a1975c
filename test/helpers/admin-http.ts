// The admin page spoken to as its script would, without a browser: form posts with the session
// cookie (named per port, as browsers need) and the page secret in its header (decision 104).
// Every page answered is kept for the tests' secret scans.
import { type Browser, chromium } from "playwright-core";
import { request } from "undici";

export interface AdminAnswer {
  status: number;
  location: string | undefined;
  setCookie: string | undefined;
  text: string;
}

/** Both halves of a session: the cookie's value and the page secret its script keeps. */
export interface AdminSession {
  cookie: string;
  secret: string;
}

/** One request to the admin page of the broker on `port`; `form` makes it a POST. */
export async function adminRequest(
  port: number,
  path: string,
  session?: Partial<AdminSession>,
  form?: Record<string, string>,
  pages?: string[],
): Promise<AdminAnswer> {
  const res = await request(`http://127.0.0.1:${port}${path}`, {
    method: form === undefined ? "GET" : "POST",
    headers: {
      ...(session?.cookie === undefined ? {} : { cookie: `kb_admin_${port}=${session.cookie}` }),
      ...(session?.secret === undefined ? {} : { "x-keybroker-session": session.secret }),
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

/** The page secret a login's answer hands the page's script. */
export const secretOf = (page: string): string | undefined => /data-session="([^"]+)"/.exec(page)?.[1];

/** The session a successful login answered with (cookie and page secret), or undefined. */
export function sessionOf(login: AdminAnswer): AdminSession | undefined {
  const cookie = cookieOf(login.setCookie);
  const secret = secretOf(login.text);
  return cookie === undefined || secret === undefined ? undefined : { cookie, secret };
}

export const csrfOf = (page: string): string | undefined => /name="csrf" value="([^"]+)"/.exec(page)?.[1];

/** Headless Chromium (the Debian package), as the admin page's browser tests drive it. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
    ],
  });
}
