import { readRegularFile } from '@murmur/shared/node';

/**
 * A record the executor keeps in its home (a conversation, a harness session and its transcript),
 * read as `readRegularFile` reads one (through no link, without waiting: a FIFO in its place held
 * a session's task, and the session, for ever), and worded for the launcher told why a record
 * cannot be used: missing (nothing is recorded), its content, or why not.
 */
export type KeptRecordRead = { missing: true } | { content: Buffer } | { unreadable: string; oversized?: true };

export async function readKeptRecord(file: string, maxBytes: number): Promise<KeptRecordRead> {
  const read = await readRegularFile(file, maxBytes);
  switch (read.found) {
    case 'content':
      return { content: read.content };
    case 'missing':
      return { missing: true };
    case 'link':
      return { unreadable: 'it is a symbolic link, which is not followed' };
    case 'not-regular':
      return { unreadable: `it is ${read.kind}` };
    case 'oversized':
      return { unreadable: `it is ${read.size} bytes, more than the ${maxBytes} such a record may hold`, oversized: true };
    case 'unreadable':
      // A file where a directory on the way belongs: nothing is recorded.
      return read.error.code === 'ENOTDIR' ? { missing: true } : { unreadable: `it cannot be read (${read.error.code ?? read.error.message})` };
  }
}
