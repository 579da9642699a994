export * from './mur-zip.js';
export * from './store.js';
export * from './registry.js';
export * from './lockfile-io.js';
export * from './build.js';
export * from './inspect.js';
export * from './verify.js';
