// Token values at rest in a fleet's Redis (docs/spec.md §17): AES-256-GCM under a key derived with HKDF
// from the home key, which every broker of a fleet shares (as it shares the CA). Each value is
// bound to its key name (the additional data), so a ciphertext moved to another login fails to
// open instead of serving the wrong tokens. Redis only ever holds `iv | tag | ciphertext`.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

const IV_BYTES = 12;
const TAG_BYTES = 16;

export class TokenCipher {
  readonly #key: Buffer;

  constructor(homeKey: Buffer) {
    this.#key = Buffer.from(hkdfSync("sha256", homeKey, "keybroker fleet", "token store v1", 32));
  }

  seal(plain: string, boundTo: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    cipher.setAAD(Buffer.from(boundTo));
    const body = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64");
  }

  /** The plain text, or undefined when the value was sealed with another key or for another name. */
  open(sealed: string, boundTo: string): string | undefined {
    const raw = Buffer.from(sealed, "base64");
    if (raw.length < IV_BYTES + TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.#key, raw.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(boundTo));
      decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString(
        "utf8",
      );
    } catch {
      return undefined;
    }
  }
}
