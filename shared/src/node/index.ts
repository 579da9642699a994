// Light Node helpers any process may load. What only a service process needs (its logger, its
// HTTP server, its life cycle) is `@murmur/shared/service`, so `mur` does not pay for it.
export * from './atomic.js';
export * from './slices.js';
export * from './cache-leftovers.js';
export * from './beneath.js';
export * from './home.js';
export * from './locate.js';
export * from './private-path.js';
export * from './process.js';
export * from './running.js';
export * from './completion.js';
export * from './blobs.js';
export * from './project-pack.js';
export * from './manifest-file.js';
export * from './small-text-file.js';
export * from './staging.js';
export * from './harness-command.js';
export * from './trace-reader.js';
export * from './bearer.js';
export * from './session-files.js';
export * from './system-failure.js';
export * from './dangling-link.js';
