import { closeSync, openSync, readSync, realpathSync } from 'node:fs';

/**
 * What the kernel opens to execute a file, so Landlock can grant exactly that: the file itself,
 * and the program that runs it — an ELF binary's interpreter (`PT_INTERP`, the dynamic loader,
 * which the kernel opens for execution too) or a script's `#!` interpreter, followed in turn.
 * Shared libraries are not here: the loader maps them, and Landlock mediates execution, not
 * mapping, so reading them is enough.
 */
export function executionClosure(file: string): string[] {
  const closure: string[] = [];
  let next: string | undefined = file;
  while (next !== undefined && closure.length < 4) {
    let real: string;
    try {
      real = realpathSync(next);
    } catch {
      break;
    }
    if (closure.includes(real)) break;
    closure.push(real);
    next = interpreterOf(real);
  }
  return closure;
}

/** The interpreter a file names, or undefined for a static binary or an unreadable file. */
export function interpreterOf(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return undefined;
  }
  try {
    const head = Buffer.alloc(4096);
    const length = readSync(fd, head, 0, head.length, 0);
    if (length >= 2 && head[0] === 0x23 && head[1] === 0x21) return shebangInterpreter(head.subarray(0, length));
    if (length < 64 || head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2 || head[5] !== 1) return undefined;
    // ELF64, little-endian: the program headers, one of which may be PT_INTERP.
    const programHeaders = Number(head.readBigUInt64LE(0x20));
    const entrySize = head.readUInt16LE(0x36);
    const count = head.readUInt16LE(0x38);
    const table = Buffer.alloc(entrySize * count);
    readSync(fd, table, 0, table.length, programHeaders);
    for (let index = 0; index < count; index += 1) {
      const at = index * entrySize;
      if (table.readUInt32LE(at) !== 3) continue;
      const offset = Number(table.readBigUInt64LE(at + 8));
      const size = Number(table.readBigUInt64LE(at + 32));
      const name = Buffer.alloc(Math.min(size, 4096));
      readSync(fd, name, 0, name.length, offset);
      return name.toString('utf8').replace(/\0.*$/s, '');
    }
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function shebangInterpreter(head: Buffer): string | undefined {
  const line = head.toString('utf8').split('\n')[0] ?? '';
  const interpreter = line.slice(2).trim().split(/\s+/)[0];
  return interpreter?.startsWith('/') ? interpreter : undefined;
}
