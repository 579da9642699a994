import { promises as fs } from 'node:fs';
import { TAIL_READ, kindOf } from '@murmur/shared/node';

/**
 * A record the executor keeps in its home (a conversation, a harness session and its transcript),
 * read as what it is: a regular file of at most `maxBytes`, opened through no link at its end and
 * without waiting (a FIFO in its place held a session's task, and the session, for ever).
 */
export type RecordFileRead = { missing: true } | { content: Buffer } | { unreadable: string; oversized?: true };

export async function readRecordFile(file: string, maxBytes: number): Promise<RecordFileRead> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, TAIL_READ);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // Nothing there, or a file where a directory on the way belongs: nothing is recorded.
    if (code === 'ENOENT' || code === 'ENOTDIR') return { missing: true };
    return { unreadable: code === 'ELOOP' ? 'it is a symbolic link, which is not followed' : `it cannot be opened (${code ?? String(error)})` };
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) return { unreadable: stat.isDirectory() ? 'it is a directory' : `it is ${kindOf(stat)}` };
    if (stat.size > maxBytes) return { unreadable: `it is ${stat.size} bytes, more than the ${maxBytes} such a record may hold`, oversized: true };
    return { content: await handle.readFile() };
  } catch (error) {
    return { unreadable: `it cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)})` };
  } finally {
    await handle.close();
  }
}
