export * from './resource.js';
export * from './list-query.js';
export * from './store.js';
export * from './handlers.js';
export * from './fields.js';
export * from './department-access.js';
export * from './references.js';
export * from './peer-references.js';
