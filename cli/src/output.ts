import { type ErrorCode, MurmurError, type MurmurErrorOptions, type MurmurWarning, formatWarning } from '@murmur/shared/errors';
import { systemFailureCode, systemFailureHint } from '@murmur/shared/node';
import { controlEscape, oneLine } from '@murmur/shared/one-line';

export { oneLine };

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

/**
 * What `mur` prints holds strangers' text — a registry's descriptions, a trace's tool names and
 * inputs, a manifest's name, a capsule's error — so a line bound for a terminal has its control
 * characters shown, never acted on (`terminalSafe`); a pipe or a file gets it as it is.
 */
export const processOutput: Output = {
  out: (line) => writeLine(process.stdout, line),
  err: (line) => writeLine(process.stderr, line),
  warn: (warning) => writeLine(process.stderr, formatWarning(warning)),
  get stderrIsTerminal() {
    return process.stderr.isTTY === true;
  },
};

function writeLine(stream: NodeJS.WriteStream, line: string): void {
  stream.write(`${stream.isTTY ? terminalSafe(line) : line}\n`);
}

/**
 * A reader that stops early (`mur trace show | head`) closes stdout. What is left unwritten is
 * not wanted, but the command's work is (a session `mur run` started ends as it would have), so
 * a closed stdout is ignored rather than left to crash mur as an unheard EPIPE. Any other failure
 * to write there (the kernel refusing a queue, `ENOBUFS`; a full disk under a redirect) is said
 * once, with its code, and the command's work goes on as for a closed one: it crashed mur, with
 * a stack, in the middle of a session.
 */
export function ignoreClosedStdout(): void {
  // A terminal that hung up refuses every write to it (EIO): nowhere is left to say so, and the
  // refusal must not end a command that is stopping its session.
  process.stderr.on('error', () => {});
  let said = false;
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE' || said) return;
    said = true;
    // Whatever else the command ends with, it did not end well: its output is not whole.
    process.exitCode = Math.max(1, Number(process.exitCode ?? 0));
    const full = error.code === 'ENOSPC' || error.code === 'EDQUOT';
    writeLine(
      process.stderr,
      new MurmurError('E-IO-003', `could not write to stdout: ${error.code ?? error.message}; what was left to write there is lost`, {
        hint: full
          ? 'the disk stdout is written to is full: free space there, or write it elsewhere, and run again'
          : 'write stdout to a file (> out.txt), or read it as fast as it comes',
      }).format(),
    );
  });
}

/** C0 controls but tab and newline, a carriage return not ending a line, DEL and the C1 controls. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this pattern finds
const TERMINAL_CONTROLS = /[\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r(?!\n)/g;

/**
 * A capsule's output as a terminal may be given it: every control character a terminal would act
 * on is shown as its escape (`\x1b`) instead. A capsule is untrusted, and its bytes reach the
 * person running it: an escape sequence could set their clipboard (OSC 52), retitle the window,
 * hide the `status:` line that follows (conceal), or a bare carriage return overwrite a line with
 * one of the runtime's own. The bidirectional controls (U+202E and its kin) are shown too: they
 * would make a name read backwards (`safe\u202egnp.exe` shows as `safeexe.png`). Output to a pipe
 * or a file is left as the capsule wrote it.
 *
 * The C0 controls are shown as `\x1b`, their familiar form; DEL, the C1 controls and the rest as
 * `\u009b`, which is also how JSON writes them: `--json` on a terminal stays JSON (JSON.stringify
 * escapes the C0 controls itself, and leaves DEL and C1 as they are).
 */
export function terminalSafe(text: string): string {
  return text.replace(TERMINAL_CONTROLS, controlEscape);
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

/**
 * A command line mur cannot take as written — flags that contradict each other, a flag or an
 * argument whose value is not one it accepts — found by a command rather than by commander: it
 * exits 2 as commander's own usage errors do (clap's, upstream), so a script can tell a mistyped
 * command from a refusal of what it asked for (1).
 */
export class UsageError extends MurmurError {
  /** `code`: upstream's own for a command's misuse where it has one (`E-TRC-002`); `E-IO-003` otherwise. */
  constructor(message: string, options: Omit<MurmurErrorOptions, 'cause'> & { code?: ErrorCode } = {}) {
    const { code, ...rest } = options;
    super(code ?? 'E-IO-003', message, rest);
  }
}

/** `error[CODE]: message` (+ `  hint: …`), or the unexpected error with a request to report it. */
export function formatFailure(error: unknown): string {
  if (error instanceof MurmurError) return error.format();
  const hint = systemFailureHint(error);
  if (hint !== undefined) return new MurmurError(systemFailureCode(error), (error as Error).message, { hint }).format();
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  return `error[E-IO-003]: unexpected failure: ${message}\n  hint: this is a bug in mur; please report it with the command you ran`;
}

/**
 * Left-aligned columns separated by two spaces; the last column is not padded. A cell is one line
 * whatever it holds (`oneLine`), and is measured as it will be shown.
 */
export function table(header: string[], cellsOfRows: string[][]): string[] {
  const rows = cellsOfRows.map((row) => row.map(oneLine));
  const widths = header.map((title, column) => rows.reduce((widest, row) => Math.max(widest, (row[column] ?? '').length), title.length));
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
