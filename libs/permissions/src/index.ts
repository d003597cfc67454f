export * from './model.js';
export * from './scopes.js';
export * from './records.js';
export * from './denials.js';
