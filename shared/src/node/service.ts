export * from './http.js';
export * from './logger.js';
export * from './service-process.js';
