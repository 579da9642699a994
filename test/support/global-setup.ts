import { buildAllGuests } from './guests.js';

export default async function setup(): Promise<void> {
  const started = Date.now();
  await buildAllGuests();
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  process.stderr.write(`[murmur tests] guest components ready in ${seconds}s\n`);
}
