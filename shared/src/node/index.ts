export * from './atomic.js';
export * from './home.js';
export * from './logger.js';
export * from './http.js';
export * from './service-process.js';
export * from './process.js';
