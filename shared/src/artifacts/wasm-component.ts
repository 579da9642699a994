const WASM_PREAMBLE = [0x00, 0x61, 0x73, 0x6d];

/** Whether the bytes are a WebAssembly component (layer 1), as opposed to a core module. */
export function isWasmComponent(bytes: Uint8Array): boolean {
  if (bytes.length < 8 || WASM_PREAMBLE.some((byte, index) => bytes[index] !== byte)) return false;
  // Core modules carry version 1 (01 00 00 00); components a version with layer 1 (.. .. 01 00).
  return bytes[6] === 0x01 && bytes[7] === 0x00 && !(bytes[4] === 0x01 && bytes[5] === 0x00);
}
