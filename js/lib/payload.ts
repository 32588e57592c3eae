// Decoding of what vinlens/widgets/_payload.py sends: explicit non-finite floats,
// typed arrays ({"$array": {dtype, shape, data}}), columnar tables ({"$table": ...})
// and {"$buffer": i} placeholders of custom messages.

export type NumericDType =
  | "bool" | "int8" | "uint8" | "int16" | "uint16" | "int32" | "uint32" | "float32" | "float64";

export type TypedArray =
  | Uint8Array | Int8Array | Int16Array | Uint16Array | Int32Array | Uint32Array
  | Float32Array | Float64Array;

export interface NDArray {
  dtype: NumericDType;
  shape: number[];
  data: TypedArray;
}

export interface NumericColumn {
  name: string;
  kind: "numeric";
  dtype: NumericDType;
  values: TypedArray;
}

export interface StringColumn {
  name: string;
  kind: "string";
  offsets: Uint32Array;
  bytes: Uint8Array;
  get(row: number): string;
}

export type Column = NumericColumn | StringColumn;

export interface Table {
  length: number;
  columns: Column[];
  column(name: string): Column;
}

type BinaryLike = DataView | ArrayBuffer | ArrayBufferView;

function toBytes(data: BinaryLike): Uint8Array {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

const CTORS = {
  bool: Uint8Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array,
  int32: Int32Array, uint32: Uint32Array, float32: Float32Array, float64: Float64Array,
} as const;

/** A typed view of little-endian bytes; copies only when the bytes are misaligned. */
export function typedArray(dtype: NumericDType, data: BinaryLike): TypedArray {
  const ctor = CTORS[dtype];
  if (!ctor) throw new Error(`unsupported dtype from the kernel: ${String(dtype)}`);
  let bytes = toBytes(data);
  const size = ctor.BYTES_PER_ELEMENT;
  if (bytes.byteLength % size !== 0) {
    throw new Error(`buffer of ${bytes.byteLength} bytes is not a whole number of ${dtype}`);
  }
  if (bytes.byteOffset % size !== 0) bytes = bytes.slice();
  return new ctor(bytes.buffer as ArrayBuffer, bytes.byteOffset, bytes.byteLength / size);
}

const decoder = new TextDecoder();

export function decodeTable(node: any): Table {
  const t = node.$table;
  const columns: Column[] = t.columns.map((c: any): Column => {
    if (c.dtype === "string") {
      const offsets = typedArray("uint32", c.offsets) as Uint32Array;
      const bytes = toBytes(c.data);
      return {
        name: c.name, kind: "string", offsets, bytes,
        get(row: number) {
          return decoder.decode(bytes.subarray(offsets[row], offsets[row + 1]));
        },
      };
    }
    return { name: c.name, kind: "numeric", dtype: c.dtype, values: typedArray(c.dtype, c.data) };
  });
  const byName = new Map(columns.map((c) => [c.name, c]));
  return {
    length: t.length,
    columns,
    column(name: string) {
      const c = byName.get(name);
      if (!c) throw new Error(`table has no column ${JSON.stringify(name)}`);
      return c;
    },
  };
}

export function decodeArray(node: any): NDArray {
  const a = node.$array;
  return { dtype: a.dtype, shape: a.shape, data: typedArray(a.dtype, a.data) };
}

/** A wire float as a number: plain JSON numbers, or {"$float": "NaN" | "Infinity" |
 * "-Infinity"}; a missing value (null, undefined) or an unknown spelling is NaN. */
export function decodeFloat(value: number | { $float: string } | null | undefined): number {
  if (value === null || value === undefined) return NaN;
  if (typeof value === "number") return value;
  return value.$float === "Infinity" ? Infinity : value.$float === "-Infinity" ? -Infinity : NaN;
}

/** Turn explicit floats, arrays and tables back into JS values, recursively. */
export function decode(value: any): any {
  if (value === null || typeof value !== "object") return value;
  if (value instanceof DataView || ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return value;
  if (Array.isArray(value)) return value.map(decode);
  if ("$float" in value) return decodeFloat(value);
  if ("$array" in value) return decodeArray(value);
  if ("$table" in value) return decodeTable(value);
  const out: Record<string, any> = {};
  for (const [k, v] of Object.entries(value)) out[k] = decode(v);
  return out;
}

/** Put custom-message buffers back where {"$buffer": i} placeholders stand. */
export function joinBuffers(value: any, buffers: DataView[]): any {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => joinBuffers(v, buffers));
  if ("$buffer" in value && Object.keys(value).length === 1) {
    const buf = buffers[value.$buffer];
    if (!buf) throw new Error(`message refers to missing buffer ${value.$buffer}`);
    return buf;
  }
  const out: Record<string, any> = {};
  for (const [k, v] of Object.entries(value)) out[k] = joinBuffers(v, buffers);
  return out;
}

// One formatter for every cell: Number.prototype.toLocaleString builds a new one per call
// (~0.15 ms each), which made scrolling a large table drop frames.
const INTEGER_FORMAT = new Intl.NumberFormat("en-US");

/** Format a number for a table cell: integers with thousands separators, floats compact. */
export function formatNumber(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "∞" : "-∞";
  if (Number.isInteger(x)) return INTEGER_FORMAT.format(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(3);
  return x.toPrecision(4).replace(/\.?0+$/, "");
}
