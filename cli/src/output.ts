import { MurmurError, type MurmurWarning, formatWarning } from '@murmur/shared/errors';

/**
 * What `mur` prints and where. stdout carries only what a command promises (a table, a JSON
 * document, a result line), so it can be piped; warnings, progress and errors go to stderr.
 */
export interface Output {
  out(line: string): void;
  err(line: string): void;
  warn(warning: MurmurWarning): void;
  readonly stderrIsTerminal: boolean;
}

export const processOutput: Output = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  warn: (warning) => process.stderr.write(`${formatWarning(warning)}\n`),
  get stderrIsTerminal() {
    return process.stderr.isTTY === true;
  },
};

/**
 * A reader that stops early (`mur trace show | head`) closes stdout. What is left unwritten is
 * not wanted, but the command's work is (a session `mur run` started ends as it would have), so
 * a closed stdout is ignored rather than left to crash mur as an unheard EPIPE.
 */
export function ignoreClosedStdout(): void {
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
  });
}

/** C0 controls but tab and newline, a carriage return not ending a line, DEL and the C1 controls. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this pattern finds
const TERMINAL_CONTROLS = /[\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f]|\r(?!\n)/g;

/**
 * A capsule's output as a terminal may be given it: every control character a terminal would act
 * on is shown as its escape (`\x1b`) instead. A capsule is untrusted, and its bytes reach the
 * person running it: an escape sequence could set their clipboard (OSC 52), retitle the window,
 * hide the `status:` line that follows (conceal), or a bare carriage return overwrite a line with
 * one of the runtime's own. Output to a pipe or a file is left as the capsule wrote it.
 */
export function terminalSafe(text: string): string {
  return text.replace(TERMINAL_CONTROLS, (control) => `\\x${control.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/**
 * `terminalSafe` over a stream that comes in chunks: a carriage return that ends one chunk is held
 * until the next says whether it ends a line (`\r\n`, kept) or stands alone (shown escaped).
 */
export class TerminalSafeStream {
  private heldReturn = false;

  write(chunk: string): string {
    let text = this.heldReturn ? `\r${chunk}` : chunk;
    this.heldReturn = text.endsWith('\r');
    if (this.heldReturn) text = text.slice(0, -1);
    return terminalSafe(text);
  }

  /** What is still held once the stream has ended: a carriage return that ended nothing. */
  end(): string {
    const held = this.heldReturn;
    this.heldReturn = false;
    return held ? terminalSafe('\r') : '';
  }
}

/** `error[CODE]: message` (+ `  hint: …`), or the unexpected error with a request to report it. */
export function formatFailure(error: unknown): string {
  if (error instanceof MurmurError) return error.format();
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  return `error[E-IO-003]: unexpected failure: ${message}\n  hint: this is a bug in mur; please report it with the command you ran`;
}

/** Left-aligned columns separated by two spaces; the last column is not padded. */
export function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)));
  const render = (row: string[]): string =>
    row
      .map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
      .join('  ')
      .trimEnd();
  return [render(header), ...rows.map(render)];
}

export function formatBytes(bytes: number): string {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1_000_000) return `${(bytes / 1000).toFixed(1)} KB`;
  return `${(bytes / 1_000_000).toFixed(1)} MB`;
}
