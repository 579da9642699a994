import { promises as fs } from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { MurmurError } from '@murmur/shared';
import {
  DEFAULT_MAX_ENTRY_BYTES,
  MAX_ENTRY_BYTES_ENV,
  MurZip,
  type ZipInput,
  inspectArchive,
  maxEntryBytesFromEnv,
  writeMurZip,
} from '@murmur/shared/artifacts';
import { listTree, tempDir } from '../../test/support/fs.js';
import { type RawEntry, rawLocalEntry, rawZip } from '../../test/support/raw-zip.js';
import { rejectionOf as rejection } from '../../test/support/refusals.js';

const text = (value: string): Buffer => Buffer.from(value, 'utf8');

/** Bytes that look like nothing in particular and do not compress away. */
function noise(length: number, seed = 7): Buffer {
  const bytes = Buffer.alloc(length);
  let state = seed;
  for (let index = 0; index < length; index += 1) {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    bytes[index] = state >>> 16;
  }
  return bytes;
}

let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('murmur-murzip-'));
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await cleanup();
});

/**
 * Opens `bytes` and, if that succeeds, extracts them into a target two levels under the temporary
 * directory (so a `../` entry would still land inside it), then returns the refusal.
 */
async function refuseAndExtract(bytes: Uint8Array, options: { maxEntryBytes?: number } = {}): Promise<{ error: MurmurError; target: string }> {
  const target = path.join(dir, 'sandbox', 'target');
  const error = await rejection(
    (async () => {
      const zip = await MurZip.open(bytes, { label: 'evil.mur.zip', ...options });
      try {
        await zip.extractTo(target);
      } finally {
        zip.close();
      }
    })(),
  );
  return { error, target };
}

describe('writeMurZip and MurZip.open', () => {
  it('round-trips every file in archive order with its exact bytes', async () => {
    const files: ZipInput[] = [
      { name: 'murmur.yaml', data: text('name: echo\nversion: 0.1.0\nruntime: tool\n') },
      { name: 'zeta.txt', data: text('last letter, second entry') },
      { name: 'nested/dir/blob.bin', data: noise(70_000) },
      { name: 'capsule.wasm', data: Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]) },
      { name: 'empty.txt', data: new Uint8Array(0) },
    ];
    const zip = await MurZip.open(await writeMurZip(files), { label: 'roundtrip.mur.zip' });
    try {
      expect(zip.names).toEqual(['murmur.yaml', 'zeta.txt', 'nested/dir/blob.bin', 'capsule.wasm', 'empty.txt']);
      for (const file of files) {
        expect(Buffer.compare(await zip.read(file.name), Buffer.from(file.data)), file.name).toBe(0);
      }
      expect(await zip.manifestText()).toBe('name: echo\nversion: 0.1.0\nruntime: tool\n');
    } finally {
      zip.close();
    }
  });

  it('writes deflate-compressed entries', async () => {
    const bytes = await writeMurZip([{ name: 'a.txt', data: text('a'.repeat(10_000)) }]);
    expect(bytes.readUInt32LE(0)).toBe(0x04034b50);
    expect(bytes.readUInt16LE(8)).toBe(8);
    expect(bytes.length).toBeLessThan(10_000);
  });

  it('keeps the executable bit of an entry written as executable', async () => {
    const zip = await MurZip.open(
      await writeMurZip([
        { name: 'bin/tool', data: text('#!/bin/sh\n'), executable: true },
        { name: 'README.md', data: text('docs') },
      ]),
      { label: 'exec.mur.zip' },
    );
    try {
      expect(zip.isExecutable('bin/tool')).toBe(true);
      expect(zip.isExecutable('README.md')).toBe(false);
    } finally {
      zip.close();
    }
  });

  it('gives identical bytes when the same files are written twice', async () => {
    const files = (): ZipInput[] => [
      { name: 'murmur.yaml', data: text('name: same\nversion: 1.0.0\nruntime: tool\n') },
      { name: 'tool.wasm', data: noise(4096, 3) },
    ];
    const first = await writeMurZip(files());
    // DOS timestamps have two-second resolution: wait past one so a clock-stamped writer would differ.
    await new Promise((resolve) => setTimeout(resolve, 2100));
    const second = await writeMurZip(files());
    expect(Buffer.compare(first, second)).toBe(0);
    const different = await writeMurZip([{ name: 'murmur.yaml', data: text('name: other\n') }]);
    expect(Buffer.compare(first, different)).not.toBe(0);
  });

  it('holds one deflate state at a time: 10 000 small files no longer take gigabytes, and read back whole', async () => {
    const deflateRaw = zlib.deflateRaw;
    const files = Array.from({ length: 10_000 }, (_, index) => ({ name: `many/f${index}`, data: text(`file ${index} `.repeat(20)) }));
    const before = process.memoryUsage.rss();
    // The entries are all handed over before this returns: yazl used to start every deflate then, ~270 KB of state each (2.2 GB).
    const writing = writeMurZip(files);
    const grown = process.memoryUsage.rss() - before;
    const bytes = await writing;
    expect(grown).toBeLessThan(800 * 1024 * 1024);
    expect(zlib.deflateRaw).toBe(deflateRaw);
    const zip = await MurZip.open(bytes, { label: 'many.mur.zip' });
    expect(zip.names).toHaveLength(10_000);
    expect(await zip.readText('many/f9999')).toBe('file 9999 '.repeat(20));
  });
});

describe('MurZip.open guards', () => {
  it("refuses an entry with a '..' component, naming it, and extracts nothing", async () => {
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: '../evil', data: text('escaped') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'../evil'");
    expect(error.message).toContain("'..' component");
    expect(await listTree(target)).toEqual([]);
    expect(await listTree(dir)).toEqual([]);
  });

  it("refuses a '..' component in the middle of an entry name", async () => {
    const { error } = await refuseAndExtract(rawZip([{ name: 'a/../../evil', data: text('x') }]));
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'..' component");
  });

  it('refuses an absolute entry name and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: '/etc/passwd', data: text('root:x:0:0::/root:/bin/sh\n') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'/etc/passwd'");
    expect(error.message).toContain('absolute path');
    expect(await listTree(target)).toEqual([]);
    expect(await listTree(dir)).toEqual([]);
  });

  it('refuses a drive-letter entry name as absolute', async () => {
    const { error } = await refuseAndExtract(rawZip([{ name: 'C:/Windows/evil.dll', data: text('x') }]));
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain('absolute path');
  });

  it('refuses an entry name with a backslash and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: '..\\evil', data: text('x') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain('backslash');
    expect(await listTree(target)).toEqual([]);
    expect(await listTree(dir)).toEqual([]);
  });

  it('refuses a symlink entry and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: 'link', data: text('/etc/passwd'), unixMode: 0o120777 },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'link'");
    expect(error.message).toContain('symlink');
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses a special file entry (a fifo)', async () => {
    const { error, target } = await refuseAndExtract(rawZip([{ name: 'pipe', data: new Uint8Array(0), unixMode: 0o010644 }]));
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain('special file');
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses a duplicate entry name and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: first\n') },
      { name: 'murmur.yaml', data: text('name: second\n') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'murmur.yaml' appears more than once");
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses entries that share one payload (the zip bomb of overlapping records), naming them, and extracts nothing', async () => {
    const payload = text('x'.repeat(4096));
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: bomb\n') },
      { name: 'a.bin', data: payload },
      ...Array.from({ length: 50 }, (_, index): RawEntry => ({ name: `copy-${index}.bin`, data: payload, sharesDataOf: 1 })),
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toMatch(/share bytes|named otherwise in its local header/);
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses entries whose bytes overlap, each header nested in the data of the one before, though each is named alike in both headers', async () => {
    const inner = text('payload'.repeat(100));
    const nested = rawLocalEntry('b.bin', inner);
    const prefix = text('name: x\n#');
    const bytes = rawZip([
      { name: 'murmur.yaml', data: Buffer.concat([prefix, nested]) },
      { name: 'b.bin', data: inner, embeddedIn: { index: 0, at: prefix.length } },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toBe(
      "evil.mur.zip: zip entries 'murmur.yaml' and 'b.bin' share bytes; an archive that reads one payload as several entries is refused",
    );
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses an encrypted entry, which another reader would ask a password for', async () => {
    const bytes = rawZip([
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: 'secret.bin', data: text('not really encrypted'), flags: 0x1 },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("zip entry 'secret.bin' is encrypted");
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses an entry whose local header names another file than its central record', async () => {
    const bytes = rawZip([{ name: 'murmur.yaml', data: text('name: x\n') }]);
    // The local header's name sits right after its 30 fixed bytes.
    const tampered = Buffer.from(bytes);
    tampered.write('MURMUR', 30, 'latin1');
    const { error } = await refuseAndExtract(tampered);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'murmur.yaml' is named otherwise in its local header");
  });

  it('refuses an archive whose entries hold more than twice the per-entry ceiling in all', async () => {
    const entries = Array.from({ length: 3 }, (_, index): RawEntry => ({ name: `part-${index}.bin`, data: new Uint8Array(800) }));
    const { error, target } = await refuseAndExtract(rawZip(entries), { maxEntryBytes: 1024 });
    expect(error.code).toBe('E-ART-002');
    expect(error.message).toContain('more than 2048 bytes in all');
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses an archive of more entries than an artifact holds', async () => {
    const entries = Array.from({ length: 10_001 }, (_, index): RawEntry => ({ name: `f${index}`, data: new Uint8Array(0) }));
    const { error } = await refuseAndExtract(rawZip(entries));
    expect(error.code).toBe('E-ART-003');
    expect(error.message).toContain('10001 entries; an artifact archive holds at most 10000');
  });

  it('refuses two entry names that normalise to the same path', async () => {
    const bytes = rawZip([
      { name: 'data/x.txt', data: text('one') },
      { name: './data//x.txt', data: text('two') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'data/x.txt' appears more than once");
    expect(await listTree(target)).toEqual([]);
  });

  it.each([
    ['case', 'skill.md', 'SKILL.md'],
    ['Unicode form', 'caf\u00e9.md', 'cafe\u0301.md'],
  ])('refuses two entry names that differ only in %s: one file where case or forms fold, and extracts nothing', async (_kind, first, second) => {
    const bytes = rawZip([
      { name: first, data: text('one') },
      { name: second, data: text('two') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain('differ only in case or Unicode form');
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses a path that is both a file and a directory, and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'a', data: text('file') },
      { name: 'a/b', data: text('inside') },
    ]);
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toContain("'a' is both a file and a directory");
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses a name no file system takes: a component over 255 bytes, a path over 1024', async () => {
    const deep = `${'d'.repeat(200)}/`.repeat(6);
    for (const name of [`${'n'.repeat(256)}.md`, `${deep}x.md`]) {
      const { error } = await refuseAndExtract(rawZip([{ name, data: text('x') }]));
      expect(error.code, name.slice(0, 20)).toBe('E-ART-001');
      expect(error.message).toMatch(/longer than (255|1024) bytes/);
    }
  });

  it('refuses an entry whose declared size is over the per-entry ceiling and extracts nothing', async () => {
    const bytes = await writeMurZip([
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: 'big.bin', data: noise(2048) },
    ]);
    const { error, target } = await refuseAndExtract(bytes, { maxEntryBytes: 1024 });
    expect(error.code).toBe('E-ART-002');
    expect(error.message).toContain("'big.bin'");
    expect(error.message).toContain('1024-byte decompression ceiling');
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses a stored entry over the ceiling whose header claims it is small, when it is opened, and extracts nothing', async () => {
    const entries: RawEntry[] = [{ name: 'big.bin', data: noise(4096), claimedSize: 16 }];
    // At the open: its stored bytes are what it holds, whatever it claims they inflate to.
    expect(await rejection(MurZip.open(rawZip(entries), { label: 'evil.mur.zip', maxEntryBytes: 1024 }))).toMatchObject({
      code: 'E-ART-002',
      message: "evil.mur.zip: zip entry 'big.bin' exceeds the 1024-byte decompression ceiling",
    });
    const { error, target } = await refuseAndExtract(rawZip(entries), { maxEntryBytes: 1024 });
    expect(error.code).toBe('E-ART-002');
    expect(error.message).toContain("'big.bin'");
    expect(await listTree(target)).toEqual([]);
  });

  it('refuses a deflated entry whose header claims it is small, inflating no more than that claim, and extracts nothing', async () => {
    // A well-formed deflated entry of 100 000 bytes, then both headers patched to claim 16 bytes:
    // reading stops at the 17th byte, whatever the ceiling, and the lie is the refusal.
    const bytes = Buffer.from(await writeMurZip([{ name: 'big.bin', data: Buffer.alloc(100_000, 0x41) }]));
    const central = bytes.indexOf(Buffer.from([0x50, 0x4b, 0x01, 0x02]));
    expect(central).toBeGreaterThan(0);
    bytes.writeUInt32LE(16, 22);
    bytes.writeUInt32LE(16, central + 24);
    for (const maxEntryBytes of [1024, 1_000_000]) {
      const { error, target } = await refuseAndExtract(bytes, { maxEntryBytes });
      expect(error.code).toBe('E-ART-003');
      expect(error.message).toContain("zip entry 'big.bin' holds more than the 16 bytes its header declares");
      expect(await listTree(target)).toEqual([]);
    }
  });

  it('refuses an entry whose header lies about its size while staying under the ceiling, and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'liar.bin', data: noise(300), claimedSize: 20 },
      { name: 'murmur.yaml', data: text('name: x\n') },
    ]);
    const { error, target } = await refuseAndExtract(bytes, { maxEntryBytes: 1_000_000 });
    expect(error.code).toBe('E-ART-003');
    expect(await listTree(target)).toEqual([]);
  });

  it('accepts an entry exactly as large as the ceiling', async () => {
    const data = noise(1024);
    const zip = await MurZip.open(await writeMurZip([{ name: 'exact.bin', data }]), { label: 'exact.mur.zip', maxEntryBytes: 1024 });
    try {
      expect(Buffer.compare(await zip.read('exact.bin'), data)).toBe(0);
    } finally {
      zip.close();
    }
    const over = await rejection(MurZip.open(await writeMurZip([{ name: 'exact.bin', data }]), { label: 'exact.mur.zip', maxEntryBytes: 1023 }));
    expect(over.code).toBe('E-ART-002');
  });

  it('refuses an entry whose bytes were changed in place, sizes kept, by its CRC-32, and extracts nothing', async () => {
    const bytes = rawZip([
      { name: 'capsule.wasm', data: noise(300) },
      { name: 'murmur.yaml', data: text('name: x\n') },
    ]);
    // A stored entry's data follows its 30-byte local header and its name.
    const at = 30 + 'capsule.wasm'.length + 100;
    bytes[at] = (bytes[at] as number) ^ 0xff;
    const { error, target } = await refuseAndExtract(bytes);
    expect(error.code).toBe('E-ART-003');
    expect(error.message).toContain("zip entry 'capsule.wasm' is corrupt: its bytes do not match the CRC-32 its header declares");
    expect(await listTree(target)).toEqual([]);
  });

  it('has publish and install refuse a damaged archive whose manifest is whole: every entry is read before one is stored', async () => {
    const good = await writeMurZip([
      { name: 'murmur.yaml', data: text('name: damaged\nversion: 0.1.0\n') },
      // A component's preamble, then bytes that do not compress: a flipped byte lands in them.
      { name: 'capsule.wasm', data: Buffer.concat([Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]), noise(4096)]) },
    ]);
    expect((await inspectArchive(good, 'damaged-0.1.0.mur.zip')).meta.name).toBe('damaged');
    const damaged = Buffer.from(good);
    // Inside capsule.wasm's compressed bytes, which follow the manifest's entry.
    const at = damaged.indexOf(Buffer.from('capsule.wasm')) + 'capsule.wasm'.length + 200;
    damaged[at] = (damaged[at] as number) ^ 0xff;
    const error = await rejection(inspectArchive(damaged, 'damaged-0.1.0.mur.zip'));
    expect(error.code).toBe('E-ART-003');
    expect(error.message).toMatch(/^damaged-0\.1\.0\.mur\.zip: (cannot read )?zip entry 'capsule\.wasm'/);
  });

  it('has publish and install refuse, as mur build does, a payload that is not a WebAssembly component (E-BLD-003)', async () => {
    for (const [what, data] of [
      ['a core module', Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00])],
      ['not wasm at all', text('#!/bin/sh\necho hello\n')],
    ] as const) {
      const archive = await writeMurZip([
        { name: 'murmur.yaml', data: text('name: not-a-component\nversion: 0.1.0\nruntime: tool\nrequires_files: [tool.wasm]\n') },
        { name: 'tool.wasm', data },
      ]);
      const error = await rejection(inspectArchive(archive, 'not-a-component-0.1.0.mur.zip'));
      expect(error.code, what).toBe('E-BLD-003');
      expect(error.message).toBe('not-a-component-0.1.0.mur.zip: tool.wasm is not a WebAssembly component (a core module, or not wasm at all)');
    }
  });

  it('refuses an archive whose central directory holds records its end record does not count, which other tools list', async () => {
    const whole = await writeMurZip([
      { name: 'murmur.yaml', data: text('name: shown\nversion: 1.0.0\n') },
      { name: 'hidden.txt', data: text('what Python and unzip list, and this reader would not') },
    ]);
    expect((await MurZip.open(whole, { label: 'whole.mur.zip' })).names).toEqual(['murmur.yaml', 'hidden.txt']);
    // The end record counts one record of the two its central directory holds.
    const hiding = Buffer.from(whole);
    const end = hiding.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
    hiding.writeUInt16LE(1, end + 8);
    hiding.writeUInt16LE(1, end + 10);
    const error = await rejection(MurZip.open(hiding, { label: 'hiding.mur.zip' }));
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toMatch(/^hiding\.mur\.zip: the central directory holds more than the 1 records its end record counts \(\d+ bytes past them\)/);
  });

  it('refuses bytes that are not a zip at all as E-ART-003, naming the archive', async () => {
    for (const bytes of [text('this is plainly not a zip archive'), Buffer.alloc(0)]) {
      const error = await rejection(MurZip.open(bytes, { label: 'junk.mur.zip' }));
      expect(error.code).toBe('E-ART-003');
      expect(error.message).toContain('junk.mur.zip is not a valid .mur.zip archive');
    }
  });

  it('refuses an archive without murmur.yaml when its manifest is asked for', async () => {
    const zip = await MurZip.open(
      await writeMurZip([
        { name: 'manifest.yaml', data: text('name: legacy\n') },
        { name: 'sub/murmur.yaml', data: text('name: nested\n') },
      ]),
      { label: 'nomanifest.mur.zip' },
    );
    try {
      const error = await rejection(zip.manifestText());
      expect(error.code).toBe('E-ART-003');
      expect(error.message).toContain('artifact missing required file murmur.yaml');
    } finally {
      zip.close();
    }
  });
});

describe('the per-entry ceiling from the environment', () => {
  it('reads a whole number of bytes from MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES', () => {
    expect(MAX_ENTRY_BYTES_ENV).toBe('MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES');
    expect(maxEntryBytesFromEnv({ MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: '1048576' })).toBe(1_048_576);
    expect(maxEntryBytesFromEnv({ MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: ' 2048 ' })).toBe(2048);
  });

  it('is 524288000 bytes when the variable is unset or blank', () => {
    expect(DEFAULT_MAX_ENTRY_BYTES).toBe(524_288_000);
    for (const env of [{}, { MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: '' }, { MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: '  ' }]) {
      expect(maxEntryBytesFromEnv(env)).toBe(524_288_000);
    }
  });

  it('refuses a value that is not a whole number of bytes, naming the variable, rather than use the default', () => {
    for (const raw of ['lots', '-5', '1e6', '12.5', '0x10', '0', '99999999999999999999']) {
      expect(() => maxEntryBytesFromEnv({ MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: raw }), raw).toThrow(
        expect.objectContaining({ code: 'E-CFG-003', path: 'MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES' }),
      );
    }
  });

  it('applies the ceiling from the environment when open is given none', async () => {
    vi.stubEnv('MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES', '100');
    const bytes = await writeMurZip([{ name: 'big.bin', data: noise(101) }]);
    const error = await rejection(MurZip.open(bytes, { label: 'env.mur.zip' }));
    expect(error.code).toBe('E-ART-002');
    expect(error.message).toContain('100-byte decompression ceiling');
  });
});

describe('rootWasmName', () => {
  async function rootOf(names: string[]): Promise<string> {
    const zip = await MurZip.open(await writeMurZip(names.map((name) => ({ name, data: text(name) }))), { label: 'pick.mur.zip' });
    try {
      return zip.rootWasmName();
    } finally {
      zip.close();
    }
  }

  it('prefers capsule.wasm over another root wasm', async () => {
    expect(await rootOf(['murmur.yaml', 'aaa.wasm', 'capsule.wasm'])).toBe('capsule.wasm');
  });

  it('chooses the single root wasm when there is no capsule.wasm', async () => {
    expect(await rootOf(['murmur.yaml', 'tool.wasm'])).toBe('tool.wasm');
  });

  it('ignores wasm files below the root', async () => {
    expect(await rootOf(['murmur.yaml', 'lib/a.wasm', 'deps/capsule.wasm', 'tool.wasm'])).toBe('tool.wasm');
    const error = await rejection(rootOf(['murmur.yaml', 'lib/capsule.wasm']));
    expect(error.code).toBe('E-ART-003');
  });

  it('refuses an archive with no root wasm', async () => {
    const error = await rejection(rootOf(['murmur.yaml', 'skill.md']));
    expect(error.code).toBe('E-ART-003');
    expect(error.message).toContain('missing root .wasm file (expected capsule.wasm or one root *.wasm)');
  });

  it('refuses several root wasm files without capsule.wasm, listing them sorted', async () => {
    const error = await rejection(rootOf(['murmur.yaml', 'b.wasm', 'a.wasm']));
    expect(error.code).toBe('E-ART-003');
    expect(error.message).toContain('multiple root .wasm files found: a.wasm, b.wasm');
  });
});

describe('extractTo', () => {
  it('writes every file except the skipped ones and reports what it wrote', async () => {
    const files: ZipInput[] = [
      { name: 'murmur.yaml', data: text('name: x\n') },
      { name: 'capsule.wasm', data: noise(512) },
      { name: 'data/notes.txt', data: text('notes') },
      { name: 'bin/run', data: text('#!/bin/sh\n'), executable: true },
    ];
    const zip = await MurZip.open(await writeMurZip(files), { label: 'extract.mur.zip' });
    const target = path.join(dir, 'out');
    try {
      const written = await zip.extractTo(target, new Set(['capsule.wasm']));
      expect(written).toEqual(['murmur.yaml', 'data/notes.txt', 'bin/run']);
    } finally {
      zip.close();
    }
    expect(await listTree(target)).toEqual(['bin/', 'bin/run', 'data/', 'data/notes.txt', 'murmur.yaml']);
    expect(await fs.readFile(path.join(target, 'murmur.yaml'), 'utf8')).toBe('name: x\n');
    expect(await fs.readFile(path.join(target, 'data/notes.txt'), 'utf8')).toBe('notes');
    expect((await fs.stat(path.join(target, 'bin/run'))).mode & 0o111).not.toBe(0);
    expect((await fs.stat(path.join(target, 'murmur.yaml'))).mode & 0o111).toBe(0);
  });

  it('writes directory entries as nothing and their files under them', async () => {
    const zip = await MurZip.open(
      rawZip([
        { name: 'docs/', data: new Uint8Array(0), unixMode: 0o040755 },
        { name: 'docs/a.md', data: text('a') },
      ]),
      { label: 'dirs.mur.zip' },
    );
    const target = path.join(dir, 'out');
    try {
      expect(zip.names).toEqual(['docs/a.md']);
      expect(zip.has('docs')).toBe(false);
      expect(await zip.extractTo(target)).toEqual(['docs/a.md']);
    } finally {
      zip.close();
    }
    expect(await listTree(target)).toEqual(['docs/', 'docs/a.md']);
  });
});
