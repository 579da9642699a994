import { readFileSync } from 'node:fs';
import { type BuiltGuest, type JsGuest, componentFromJs } from '@murmur/guest-kit';

/**
 * Drivers written for one test's purpose, in JavaScript (componentize-js), from the sources in
 * `drivers/`. They speak the host's driver wire themselves and call no model.
 */

function driverFile(name: string): string {
  return readFileSync(new URL(`./drivers/${name}`, import.meta.url), 'utf8');
}

/** Opts into continuation on its first turn (unless its config says NOCONT); its second turn reports what it was sent. */
export const CONTINUATION_DRIVER: JsGuest = {
  source: driverFile('continuation-driver.js'),
  world: driverFile('continuation-driver.wit'),
  worldName: 'tool',
};

export function continuationDriver(): Promise<BuiltGuest> {
  return componentFromJs(CONTINUATION_DRIVER);
}
