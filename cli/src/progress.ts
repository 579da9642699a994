import type { StageProgress } from '@murmur/stager';
import { type Output, formatBytes, terminalSafe } from './output.js';

/**
 * Staging progress on a terminal: while the staging waits for a turn at a busy stager, one line
 * saying how many are ahead; then one line per component, ticking while jco transpiles (a 12 MB
 * component takes a second or two cold), replaced by its outcome. Off a terminal it prints nothing,
 * so logs and pipes stay clean.
 */
export function terminalProgress(output: Output): { report(progress: StageProgress): void; stop(): void } {
  if (!output.stderrIsTerminal) return { report: () => {}, stop: () => {} };
  const frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
  let ticker: NodeJS.Timeout | undefined;
  const stopTicker = (): void => {
    if (ticker) clearInterval(ticker);
    ticker = undefined;
  };
  let waiting = false;
  return {
    report(progress) {
      if (progress.phase === 'queued') {
        waiting = true;
        process.stderr.write(`\r\u001b[2K… waiting for a turn at the stager ${terminalSafe(progress.stager_id)}: ${progress.ahead} ahead`);
        return;
      }
      if (waiting) {
        waiting = false;
        process.stderr.write('\r\u001b[2K');
      }
      if (progress.phase !== 'transpile') return;
      // Only ever on a terminal, and the artifact's name is the manifest's: shown, never acted on.
      const what = `${terminalSafe(progress.artifact)} (${formatBytes(progress.bytes)})`;
      if (progress.state === 'start') {
        const started = Date.now();
        let frame = 0;
        stopTicker();
        ticker = setInterval(() => {
          frame = (frame + 1) % frames.length;
          process.stderr.write(`\r${frames[frame]} transpiling ${what} ${((Date.now() - started) / 1000).toFixed(1)}s`);
        }, 100);
        ticker.unref();
        process.stderr.write(`${frames[0]} transpiling ${what}`);
      } else if (progress.state === 'done') {
        stopTicker();
        process.stderr.write(`\r\u001b[2K✓ transpiled ${what} in ${((progress.ms ?? 0) / 1000).toFixed(1)}s\n`);
      } else {
        process.stderr.write(`✓ ${what}: transpiled before (cache hit)\n`);
      }
    },
    stop: stopTicker,
  };
}
