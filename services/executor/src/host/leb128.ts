/** A whole number as a minimal unsigned LEB128, the WebAssembly binary format's integer encoding. */
export function encodeU32(value: number): number[] {
  const out: number[] = [];
  let rest = value;
  do {
    const low = rest % 128;
    rest = Math.floor(rest / 128);
    out.push(rest === 0 ? low : low | 0x80);
  } while (rest !== 0);
  return out;
}
