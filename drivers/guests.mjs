// The first-party artifacts built from JavaScript, as guest-kit guests: `{source, world,
// worldName, disableFeatures}` for componentFromJs. A driver's source is common.js (the part both
// drivers share), then its core.js (its dialect), then guest.js (the component entry both share);
// murmur-hook-eval's is its scoring.js, then its hook.js. componentize-js resolves no relative
// imports, so each artifact's files are concatenated into one module.
import { readFileSync } from 'node:fs';

export const DRIVERS = ['anthropic', 'openai'];

/** The source of `murmur-driver-<driver>`: common.js, its core.js and the shared guest.js, in that order. */
export function driverSource(driver) {
  const read = (file) => readFileSync(new URL(file, import.meta.url), 'utf8');
  return `${read('./common.js')}\n${read(`./murmur-driver-${driver}/core.js`)}\n${read('./guest.js')}`;
}

/** The guest of `murmur-driver-<driver>`. */
export function driverGuest(driver) {
  const world = readFileSync(new URL(`./murmur-driver-${driver}/driver.wit`, import.meta.url), 'utf8');
  // No feature disabled: `fetch` needs componentize-js's http feature (kept by default anyway).
  return { source: driverSource(driver), world, worldName: 'driver', disableFeatures: [] };
}

/** The first-party hooks, by the suffix of their `murmur-hook-<hook>` name. */
export const HOOKS = ['eval'];

/** The source of `murmur-hook-<hook>`: its scoring.js, then its hook.js. */
export function hookSource(hook) {
  const read = (file) => readFileSync(new URL(`./murmur-hook-${hook}/${file}`, import.meta.url), 'utf8');
  return `${read('scoring.js')}\n${read('hook.js')}`;
}

/** The guest of `murmur-hook-<hook>`. */
export function hookGuest(hook) {
  const world = readFileSync(new URL(`./murmur-hook-${hook}/hook.wit`, import.meta.url), 'utf8');
  // It makes no request: no http.
  return { source: hookSource(hook), world, worldName: 'hook', disableFeatures: ['http'] };
}
