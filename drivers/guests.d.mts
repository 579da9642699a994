/** The first-party drivers, by the suffix of their `murmur-driver-<driver>` name. */
export const DRIVERS: string[];
/** The source of `murmur-driver-<driver>`: common.js, its core.js and the shared guest.js, in that order. */
export function driverSource(driver: string): string;
/** The guest of `murmur-driver-<driver>`, for guest-kit's componentFromJs. */
export function driverGuest(driver: string): { source: string; world: string; worldName: string; disableFeatures: string[] };
/** The first-party hooks, by the suffix of their `murmur-hook-<hook>` name. */
export const HOOKS: string[];
/** The source of `murmur-hook-<hook>`: its scoring.js, then its hook.js. */
export function hookSource(hook: string): string;
/** The guest of `murmur-hook-<hook>`, for guest-kit's componentFromJs. */
export function hookGuest(hook: string): { source: string; world: string; worldName: string; disableFeatures: string[] };
