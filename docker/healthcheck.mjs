// Container health check: `node /opt/murmur/docker/healthcheck.mjs <url>` exits 0 when a GET of
// <url> answers HTTP 200 within 2 seconds, 1 otherwise (the image has no curl or wget).
const url = process.argv[2];
if (!url) {
  process.stderr.write('usage: healthcheck.mjs <url>\n');
  process.exit(1);
}
try {
  const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  await response.body?.cancel();
  if (response.status !== 200) {
    process.stderr.write(`${url}: HTTP ${response.status}\n`);
    process.exit(1);
  }
  process.exit(0);
} catch (error) {
  process.stderr.write(`${url}: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}
