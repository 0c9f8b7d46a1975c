import { describe, expect, it } from "vitest";
import { BrokerError } from "../../../core/errors.js";
import { codingsToUndo } from "../../../proxy/response-body.js";

describe("codingsToUndo", () => {
  it("lists the codings to undo, the last applied first, without identity", () => {
    expect(codingsToUndo(undefined)).toEqual([]);
    expect(codingsToUndo("identity")).toEqual([]);
    expect(codingsToUndo("GZIP")).toEqual(["gzip"]);
    expect(codingsToUndo("gzip, br")).toEqual(["br", "gzip"]);
    expect(codingsToUndo(["deflate", "x-gzip"])).toEqual(["x-gzip", "deflate"]);
  });

  it("refuses a coding it cannot undo, naming it", () => {
    for (const header of ["zstd", "gzip, compress", "br, foo"]) {
      expect(() => codingsToUndo(header)).toThrow(BrokerError);
      expect(() => codingsToUndo(header)).toThrow(header);
    }
  });
});
