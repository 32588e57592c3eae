import { describe, expect, it } from "vitest";
import { decode, decodeFloat, decodeTable, joinBuffers, typedArray, formatNumber } from "./payload";
import { csvField } from "./dom";

function u32(values: number[]): DataView {
  const a = new Uint32Array(values);
  return new DataView(a.buffer);
}

describe("payload decoding", () => {
  it("restores explicit non-finite floats", () => {
    const out = decode({ a: { $float: "NaN" }, b: [{ $float: "Infinity" }, { $float: "-Infinity" }], c: 1.5 });
    expect(Number.isNaN(out.a)).toBe(true);
    expect(out.b).toEqual([Infinity, -Infinity]);
    expect(out.c).toBe(1.5);
  });

  it("decodes one wire float the same way everywhere (one decoder)", () => {
    expect(decodeFloat(2.5)).toBe(2.5);
    expect(decodeFloat({ $float: "Infinity" })).toBe(Infinity);
    expect(decodeFloat({ $float: "-Infinity" })).toBe(-Infinity);
    expect(Number.isNaN(decodeFloat({ $float: "NaN" }))).toBe(true);
    expect(Number.isNaN(decodeFloat(null))).toBe(true);
    expect(Number.isNaN(decodeFloat({ $float: "bogus" }))).toBe(true);
    expect(decode({ x: { $float: "-Infinity" } }).x).toBe(-Infinity);
  });

  it("decodes a string column lazily from offsets and utf-8 bytes", () => {
    const bytes = new TextEncoder().encode("encoderé<img>");
    const t = decodeTable({
      $table: { length: 3, columns: [
        { name: "path", dtype: "string", offsets: u32([0, 7, 9, bytes.length]), data: new DataView(bytes.buffer) },
        { name: "n", dtype: "int32", data: new DataView(new Int32Array([1, 2, 3]).buffer) },
      ] },
    });
    const path = t.column("path");
    expect(path.kind).toBe("string");
    if (path.kind === "string") expect([path.get(0), path.get(1), path.get(2)]).toEqual(["encoder", "é", "<img>"]);
    const n = t.column("n");
    expect(Array.from(n.kind === "numeric" ? n.values : [])).toEqual([1, 2, 3]);
    expect(() => t.column("missing")).toThrow(/missing/);
  });

  it("copies misaligned buffers instead of failing", () => {
    const raw = new Uint8Array(9);
    new Float64Array(raw.buffer, 0, 1);
    const view = new DataView(raw.buffer, 1, 8);
    expect(typedArray("float64", view).length).toBe(1);
    expect(() => typedArray("float32", new DataView(new ArrayBuffer(6)))).toThrow(/whole number/);
  });

  it("puts custom-message buffers back by index", () => {
    const b0 = new DataView(new ArrayBuffer(4));
    expect(joinBuffers({ x: [{ $buffer: 0 }] }, [b0]).x[0]).toBe(b0);
    expect(() => joinBuffers({ $buffer: 3 }, [b0])).toThrow(/missing buffer 3/);
  });

  it("formats numbers for cells", () => {
    expect(formatNumber(1234567)).toBe("1,234,567");
    expect(formatNumber(NaN)).toBe("NaN");
    expect(formatNumber(0.5)).toBe("0.5");
  });

  it("quotes CSV fields and defuses formulas", () => {
    expect(csvField('a,"b"')).toBe('"a,""b"""');
    expect(csvField("=cmd()")).toBe("'=cmd()");
    expect(csvField("-1.5")).toBe("-1.5");
  });
});
